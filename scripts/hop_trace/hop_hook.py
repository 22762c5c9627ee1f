"""Per-process trace of the graph's request path, for finding where time goes between client and engine.

Loaded into every Ray worker by scripts/hop_trace/sitecustomize.py (put this directory on PYTHONPATH of the
process that starts Ray). Appends JSON lines to $HOP_TRACE_DIR/<pid>.jsonl: GC pauses > 10 ms, event-loop
callbacks > 30 ms, and per request: admit start/end and every engine delta in the ingress, every body chunk the
ingress replica hands to Serve, every delta the vLLM adapter yields. Analyse with scripts/hop_trace/analyze.py.
A diagnostic, never loaded by `make serve`.
"""
import asyncio, gc, json, os, threading, time

OUT = os.environ.get("HOP_TRACE_DIR", "/tmp/hop_trace")
os.makedirs(OUT, exist_ok=True)
_lock = threading.Lock()
_f = None

def rec(kind, **kw):
    global _f
    with _lock:
        if _f is None:
            _f = open(f"{OUT}/{os.getpid()}.jsonl", "a", buffering=1)
        _f.write(json.dumps({"t": time.time(), "pid": os.getpid(), "k": kind, **kw}) + "\n")

def setup():
    _gc_start = {}
    def cb(phase, info):
        if phase == "start":
            _gc_start[threading.get_ident()] = time.perf_counter()
        else:
            s = _gc_start.pop(threading.get_ident(), None)
            if s is not None:
                d = time.perf_counter() - s
                if d > 0.01:
                    rec("gc", gen=info.get("generation"), dur=d, collected=info.get("collected"))
    gc.callbacks.append(cb)

    orig_run = asyncio.events.Handle._run
    def _run(self):
        s = time.perf_counter()
        try:
            return orig_run(self)
        finally:
            d = time.perf_counter() - s
            if d > 0.03:
                try:
                    r = repr(self)[:300]
                except Exception:
                    r = "?"
                rec("slow_cb", dur=d, cb=r, thread=threading.current_thread().name)
    asyncio.events.Handle._run = _run

    # request milestones (patch lazily when modules import)
    try:
        import agentserve.ingress.lifecycle as L
        oadmit = L.RequestLifecycle.admit
        async def admit(self):
            rec("admit_start", id=self.id)
            r = await oadmit(self)
            rec("admit_end", id=self.id)
            return r
        L.RequestLifecycle.admit = admit
        onext = L.RequestLifecycle._next_delta
        async def _next_delta(self, timeout):
            d = await onext(self, timeout)
            rec("ingress_delta", id=self.id, n=len(d.token_ids) if d is not None else -1)
            return d
        L.RequestLifecycle._next_delta = _next_delta
        ocall = L._LifecycleResponse.__call__
        async def __call__(self, scope, receive, send):
            first = [True]
            lid = self._lifecycle.id if hasattr(self, "_lifecycle") else "?"
            async def s2(msg):
                if msg.get("type") == "http.response.body" and msg.get("body"):
                    rec("body_send", id=lid, n=len(msg["body"]))
                await send(msg)
            return await ocall(self, scope, receive, s2)
        L._LifecycleResponse.__call__ = __call__
    except Exception as e:
        rec("patch_fail", where="lifecycle", err=repr(e))
    try:
        import agentserve.engines.vllm as V
        ogen = V.VllmEngine.generate
        async def generate(self, request):
            rec("engine_gen_start", id=request.request_id)
            first = True
            async for d in ogen(self, request):
                rec("engine_out", id=request.request_id, n=len(d.token_ids))
                yield d
        V.VllmEngine.generate = generate
    except Exception as e:
        rec("patch_fail", where="vllm", err=repr(e))
    if os.environ.get("HOP_TRACE_PROXY", "1") == "1":
        _patch_proxy()
    rec("setup", name=threading.current_thread().name)


def _patch_proxy():
    """In Serve's HTTP proxy: when each batch of ASGI messages arrives from the ingress replica (its unpickling) and
    when each body chunk goes to uvicorn. Times only, no request ids: at c=1 one request is in flight."""
    try:
        import pickle

        import ray.serve._private.proxy as P

        class _Pickle:
            def __getattr__(self, name):
                return getattr(pickle, name)

            @staticmethod
            def loads(data, *a, **kw):
                msgs = pickle.loads(data, *a, **kw)
                body = sum(len(m.get("body", b"")) for m in msgs if isinstance(m, dict)) if isinstance(msgs, list) else 0
                rec("proxy_batch", nbytes=len(data), body=body)
                return msgs

        P.pickle = _Pickle()
        ocall = P.HTTPProxy.__call__

        async def __call__(self, scope, receive, send):
            async def s2(msg):
                if msg.get("type") == "http.response.body" and msg.get("body"):
                    rec("proxy_send", n=len(msg["body"]))
                await send(msg)

            return await ocall(self, scope, receive, s2)

        P.HTTPProxy.__call__ = __call__
    except Exception as e:
        rec("patch_fail", where="proxy", err=repr(e))
