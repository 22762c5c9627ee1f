"""Engine replica deployment: one engine per replica, tokens streamed back in one Ray hop.

Each catalog model has its own Engine deployment (named by ServeArgs.resolve_catalog), with its own replicas and autoscaling; a replica serves one model
(with its LoRA adapters) and registers under that model with the router."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import Any, AsyncIterator

from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.handle import DeploymentHandle

from agentserve import metrics
from agentserve.config import LoraAdapterSpec, ResolvedCatalog, ServeArgs
from agentserve.engines import make_engine
from agentserve.protocol import EngineDelta, EngineRequest, RouteDecision
from agentserve.protocol.cluster import AdapterLoadResult, EngineReplicaStats, ModelAdapters, ReplicaRegistration
from agentserve.serve.autoscaling import PrefillTracker
from agentserve.serve.deployments.router_calls import RouterCalls
from agentserve.serve.handles import on_this_process
from agentserve.serve.heap import freeze_startup_heap
from agentserve.serve.ray_metrics import start_export
from agentserve.traces.otel import open_spans

logger = logging.getLogger("ray.serve")

HEARTBEAT_S = 2.0  # liveness and lease renewal; the router's lease_s must be several of these
REPORT_DELAY_S = 0.01  # first-token / finished signals wait this long to travel to the router in one call


class RouterSignals:
    """Batches this replica's request signals for the router: one call carries many requests' first tokens and
    ends, off every request's critical path. The running set renews the requests' leases on each heartbeat."""

    def __init__(self, routers: RouterCalls, replica_id: str) -> None:
        self._routers = routers
        self._replica = replica_id
        self._first: list[str] = []
        self._finished: list[str] = []
        self._scheduled = False
        self.running: set[str] = set()

    def started(self, request_id: str) -> None:
        self.running.add(request_id)

    def first_token(self, request_id: str) -> None:
        self._first.append(request_id)
        self._schedule()

    def finished(self, request_id: str) -> None:
        self.running.discard(request_id)
        self._finished.append(request_id)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            # In a context of its own: the batch carries many requests' signals, so its call must not be a child of
            # the request that happened to schedule it (Ray and Serve cancel a request's child calls with it, and
            # the ingress cancels every engine stream it closes, even a finished one).
            asyncio.get_running_loop().call_later(REPORT_DELAY_S, self.flush, context=contextvars.Context())

    def flush(self) -> None:
        self._scheduled = False
        if not self._first and not self._finished:
            return
        first, self._first = self._first, []
        finished, self._finished = self._finished, []
        self._routers.each_nowait("report", self._replica, first, finished)  # every Router: each holds some leases


def merge(deltas: list[EngineDelta]) -> EngineDelta:
    """Coalesce deltas that queued up while the previous chunk was in flight."""
    if len(deltas) == 1:
        return deltas[0]
    first, last = deltas[0], deltas[-1]
    return EngineDelta(
        token_ids=[t for d in deltas for t in d.token_ids],
        finish_reason=last.finish_reason,
        num_cached_tokens=first.num_cached_tokens,
        prompt_tokens=first.prompt_tokens,
        error=last.error,
        logprobs=tuple(lp for d in deltas for lp in d.logprobs or ()) if first.logprobs is not None else None,
    )


@serve.deployment(
    name="Engine",
    max_ongoing_requests=1024,  # the engine's scheduler is the real queue
    request_router_config=RequestRouterConfig(
        request_router_class="agentserve.serve.deployments.engine_pinning:PinToChosenReplica"
    ),
    health_check_period_s=10,
    graceful_shutdown_timeout_s=30,
)
class EngineReplica:
    async def __init__(
        self, args: dict[str, Any], catalog: dict[str, Any], router: DeploymentHandle, model_id: str
    ) -> None:
        self._args = ServeArgs.from_any(args)
        self._model = ResolvedCatalog.from_any(catalog).model(model_id)  # the catalog model this deployment serves
        self._spec = ResolvedCatalog.from_any(catalog).engine(model_id)
        self._prefill = PrefillTracker()  # autoscaling signal (record_autoscaling_stats) and metrics
        self._spans = open_spans(self._args.request_traces, "Engine")  # request spans (traces/otel.py)
        start_export()
        self._engine = make_engine(self._spec, self._model, self._model.resolve_path())
        await self._engine.start()
        self._replica_id = serve.get_replica_context().replica_id.unique_id
        self._routers = RouterCalls(on_this_process(router))
        self._signals = RouterSignals(self._routers, self._replica_id)
        self._kv_endpoints = self._kv_endpoints_of_engine()
        await self._load_runtime_adapters()  # before registering: no adapter request reaches a replica without it
        await self._warm_start()  # before registering too: the Router sends nothing until the sessions are warm
        await self._register_everywhere()
        self._heartbeat = asyncio.create_task(self._report_forever())
        freeze_startup_heap()
        logger.info("engine replica %s of %s ready (%s)", self._replica_id, self._model.id, self._spec.kind)

    async def _load_runtime_adapters(self) -> None:
        """Load the adapters the admin route loaded on this model's other replicas (the Router keeps the list), so
        a replica added by scale-up or a restart serves them too. One that fails to load is logged, not fatal: the
        replica still serves the base model and every other adapter."""
        try:
            primary = self._routers.primary()
            runtime: tuple[ModelAdapters, ...] = await self._routers.to(
                primary and primary.replica_id, "adapters", self._model.id, True
            )
        except Exception:  # the router is restarting: it has forgotten run-time adapters anyway
            logger.warning("could not fetch run-time LoRA adapters from the router", exc_info=True)
            return
        for spec in (s for entry in runtime for s in entry.adapters):
            try:
                await self._engine.load_adapter(spec)
                logger.info("replica %s loaded run-time LoRA adapter %s", self._replica_id, spec.id)
            except ValueError:
                logger.warning("replica %s could not load run-time LoRA adapter %s", self._replica_id, spec.id,
                               exc_info=True)  # fmt: skip

    async def _warm_start(self) -> None:
        """Prefill the sessions that were live before this replica (serve/warm_start.py); never fatal. Not for a
        model that reads images: the kept prompts hold the images' placeholders without the images."""
        spec = self._args.warm_start
        if not spec.enabled or spec.max_sessions == 0 or not self._args.kept_turns.enabled:
            return
        if "image" in self._model.input_modalities:
            return
        from agentserve.serve.warm_start import warm_start
        from agentserve.state.kept_turns import open_kept_turns

        try:
            store = await asyncio.to_thread(open_kept_turns, self._args.kept_turns, self._args.state)
        except Exception:  # the database is unreachable: start cold
            logger.warning("warm start skipped: the state backend could not be opened", exc_info=True)
            return
        assert store is not None
        try:
            await warm_start(
                self._engine, self._model.id, spec, store, context_window=self._model.context_window,
                adapters={a.id for a in self._engine.adapters()},
            )  # fmt: skip
        except Exception:
            logger.warning("warm start failed; the replica starts with what it prefilled", exc_info=True)
        finally:
            await asyncio.to_thread(store.close)

    def _registration_info(self) -> ReplicaRegistration:
        """What the router learns as this replica registers: its KV endpoints and the LoRA adapters it holds beyond
        the declared ones (so a restarted Router relearns the adapters loaded at run time)."""
        declared = {a.id for a in self._model.adapters}
        kv, replay = self._kv_endpoints
        runtime = tuple(a for a in self._engine.adapters() if a.id not in declared)
        return ReplicaRegistration(
            model=self._model.id, kv_endpoint=kv, replay_endpoint=replay, adapters=runtime,
            kv_capacity_tokens=self._engine.kv_capacity_tokens(),
        )  # fmt: skip

    def _kv_endpoints_of_engine(self) -> tuple[str | None, str | None]:
        """Where the router subscribes to this replica's KV events and asks for replays (None: it learns
        approximately)."""
        ports = getattr(self._engine, "kv_event_ports", lambda: None)()
        if ports is None:
            return None, None
        import ray

        host = ray.util.get_node_ip_address()
        return f"tcp://{host}:{ports[0]}", f"tcp://{host}:{ports[1]}"

    async def _register_everywhere(self) -> None:
        """Join every Router replica's index. The first call may reach only one (this process's handle learns the
        Router replicas with it): then once more to each, which re-registering at start costs nothing."""
        answers = await self._routers.each("register", self._replica_id, self._registration_info(), timeout_s=None)
        for failure in (a for a in answers.values() if isinstance(a, BaseException)):
            raise failure
        if None in answers and self._routers.members():
            await self._routers.each("register", self._replica_id, self._registration_info(), timeout_s=None)

    async def _report_forever(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            answers = await self._routers.each("heartbeat", self._replica_id, list(self._signals.running))
            for router, known in answers.items():
                try:
                    if isinstance(known, BaseException):  # a Router restarting must not kill the engine
                        raise known
                    if known is False:  # that Router (re)started: join its index
                        await self._routers.to(router, "register", self._replica_id, self._registration_info())
                except Exception:
                    logger.warning("router heartbeat to %s failed", router, exc_info=True)

    async def generate(
        self, request: EngineRequest, route: RouteDecision | None = None
    ) -> AsyncIterator[EngineDelta]:
        queue: asyncio.Queue[EngineDelta | None] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for delta in self._engine.generate(request):
                    queue.put_nowait(delta)
            except Exception as exc:
                logger.exception("engine failed on %s", request.request_id)
                queue.put_nowait(EngineDelta(token_ids=[], finish_reason="error", error=str(exc)))
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(pump())
        received = time.perf_counter()
        self._admitted(request, route)
        first = True
        sent_at = 0.0
        budget = self._spec.max_chunks_per_s
        span = self._spans.child("engine.generate", request.trace, {"agentserve.replica": self._replica_id})
        try:
            ended = False
            while not ended:
                item = await queue.get()
                if item is None:
                    return
                if not first and budget and item.finish_reason is None:
                    # Space this stream's chunks by (running requests / budget): one stream gets every token
                    # at once; hundreds get theirs in groups, so the per-chunk cost of the hops stays bounded.
                    gap = len(self._signals.running) / budget - (time.perf_counter() - sent_at)
                    if gap > 0.001:
                        await asyncio.sleep(gap)
                batch = [item]
                while self._args.coalesce_stream and not queue.empty():
                    nxt = queue.get_nowait()
                    if nxt is None:
                        ended = True
                        break
                    batch.append(nxt)
                out = merge(batch)
                if first:
                    first = False
                    self._first_token(request, out, time.perf_counter() - received)
                    span.set({"gen_ai.usage.input_tokens": out.prompt_tokens, "agentserve.cached_tokens":
                              out.num_cached_tokens, "agentserve.ttft_s": time.perf_counter() - received})
                yield out
                sent_at = time.perf_counter()
                ended = ended or batch[-1].finish_reason is not None
        finally:
            task.cancel()  # the consumer went away: cancelling the engine stream aborts it
            self._finished(request)
            span.end()

    # -- load signals: Prometheus (through Ray) and Serve's autoscaler ---------------------------------------
    def _admitted(self, request: EngineRequest, route: RouteDecision | None) -> None:
        self._signals.started(request.request_id)
        expected_cached = route.overlap_blocks * self._spec.block_size if route else 0
        self._prefill.admitted(request.request_id, len(request.token_ids) - expected_cached)
        self._set_load_gauges(request.model)

    def _first_token(self, request: EngineRequest, delta: EngineDelta, ttft_s: float) -> None:
        self._signals.first_token(request.request_id)
        self._prefill.first_token(request.request_id, ttft_s)
        metrics.ENGINE_TTFT.labels(request.model).observe(ttft_s)
        metrics.ENGINE_PROMPT_TOKENS.labels(request.model).inc(delta.prompt_tokens or len(request.token_ids))
        metrics.ENGINE_CACHED_TOKENS.labels(request.model).inc(delta.num_cached_tokens or 0)
        self._set_load_gauges(request.model)

    def _finished(self, request: EngineRequest) -> None:
        self._signals.finished(request.request_id)
        self._prefill.finished(request.request_id)
        self._set_load_gauges(request.model)

    def _set_load_gauges(self, model: str) -> None:
        metrics.ENGINE_PENDING_PREFILL.labels(model).set(self._prefill.pending_tokens)
        metrics.ENGINE_RUNNING.labels(model).set(self._prefill.running)

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Serve's custom autoscaling metrics hook, read by agentserve.serve.autoscaling:PrefillPressurePolicy."""
        return self._prefill.stats()

    def replica_id(self) -> str:
        return self._replica_id

    async def load_adapter(self, adapter: LoraAdapterSpec, route: RouteDecision | None = None) -> AdapterLoadResult:
        """Load a LoRA adapter into this replica's engine at run time (the admin call does it on every replica of
        the model: `route` pins the call to one). Says which replica answered, so the caller can tell a pinned call
        from one Serve sent elsewhere, and the adapters it now serves; an adapter the engine cannot load is an
        `error`, and the replica keeps serving."""
        loaded: bool | None = None
        error: str | None = None
        try:
            loaded = await self._engine.load_adapter(adapter)
        except ValueError as exc:
            error = str(exc)
        return AdapterLoadResult(
            replica_id=self._replica_id,
            model=self._model.id,
            adapters=tuple(a.id for a in self._engine.adapters()),
            loaded=loaded,
            error=error,
        )

    def stats(self, route: RouteDecision | None = None) -> EngineReplicaStats:
        """`route` pins the call to one replica (engine_pinning.PinToChosenReplica), so each replica can be asked."""
        s = self._engine.stats()
        return EngineReplicaStats(
            replica_id=self._replica_id,
            model=self._model.id,
            active=s.active,
            started=s.started,
            aborted=s.aborted,
            cached_blocks=s.cached_blocks,
        )

    async def __del__(self) -> None:
        # Start-up may have failed part way (e.g. an engine config vLLM rejects): clean up what exists.
        heartbeat = getattr(self, "_heartbeat", None)
        if heartbeat is not None:
            heartbeat.cancel()
            # Leave the router's index now rather than after the heartbeat timeout. A live router answers in
            # milliseconds; when the whole app is deleted the router stops beside this replica and never answers,
            # so the wait is short (a missed deregistration is the heartbeat timeout's, as for a killed replica).
            try:
                await asyncio.wait_for(self._routers.each("deregister", self._replica_id), timeout=0.5)
            except Exception:
                pass
        engine = getattr(self, "_engine", None)
        if engine is not None:
            await engine.shutdown()
