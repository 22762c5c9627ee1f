"""One generation request's life, the same for every wire API: admit -> engine stream -> postprocess -> release.

`RequestPath` is the ingress replica's shared half (deployment handles, tokenizer, prefix doctor);
`RequestLifecycle` is one request and owns everything it holds: its router lease, its engine stream, its
doctor record. Every exit (normal end, client gone at any stage, engine failure, ingress error, timeout)
goes through `close()`, which is synchronous and idempotent so it can run from any `finally`. Each API
contributes only a decoder (before the lifecycle starts) and a `WireStream` encoder (bytes in its own idiom).

    async with RequestLifecycle(path, gen, model, options, api="chat", scope=caller, arrived=t0) as life:
        await life.admit()                      # 4xx / 503 here, before any byte is sent
        return life.streaming_response(wire)    # or: events = await life.collect()

Only an engine replica's death marks it failed in the router; an exception in the ingress's own code
(detokenizer, parsers, encoders) ends that one request with its API's error and a log line.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol

from ray.exceptions import RayActorError
from ray.serve.handle import DeploymentHandle
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from agentserve import metrics
from agentserve.config import ModelSpec, ServeArgs
from agentserve.doctor import PrefixDoctor, PrefixReport
from agentserve.logprobs import logprobs_event
from agentserve.postprocess import Postprocessor
from agentserve.protocol import EngineDelta, GenerationRequest, PreprocessedRequest, RouteDecision
from agentserve.preprocess.turn_digest import key_after
from agentserve.protocol.errors import RequestError
from agentserve.protocol.events import ToolCallError, ToolCallTruncated
from agentserve.serve.http import SSE_HEADERS
from agentserve.serve.observe import StreamObserver, bind_request_id, observe_prefix, observe_route
from agentserve.serve.speculative import SpeculativePrefill, TurnCollector
from agentserve.state.kept_turns import KeptTurnStore

logger = logging.getLogger("ray.serve")


@dataclass(frozen=True)
class ParseOptions:
    """How to parse one request's output (decided by the API from the request)."""

    tools: list[dict[str, Any]]
    parse_tool_calls: bool = True
    # None: as the request's thinking switch says; True: always (the API's encoder decides what to show).
    parse_reasoning: bool | None = None
    id_factory: Callable[[], str] | None = None


class WireStream(Protocol):
    """What an API contributes to a streamed reply: bytes in its own idiom."""

    def opening(self) -> bytes: ...

    def encode(self, events: list[Any]) -> bytes: ...

    def keepalive(self) -> bytes: ...

    def failure(self, err: RequestError) -> bytes: ...

    def closing(self) -> bytes: ...


SSE_COMMENT_KEEPALIVE = b": keep-alive\n\n"  # valid SSE that every client's parser skips


def engine_died(exc: BaseException) -> bool:
    """The engine replica's actor is gone (not: the ingress failed, or the engine reported an error)."""
    return isinstance(exc, RayActorError)


class RequestPath:
    """The ingress replica's shared request path: one per replica, one `RequestLifecycle` per request.

    `engine` is one handle (the single-model form) or one per catalog model id; `tokenizer` is the default model's,
    `tokenizers` (by model id) those of the others. Finding a request's engine and tokenizer is a dict lookup."""

    def __init__(
        self,
        args: ServeArgs,
        *,
        preprocessor: DeploymentHandle,
        router: DeploymentHandle,
        engine: DeploymentHandle | dict[str, DeploymentHandle],
        tokenizer: Any,
        kept: KeptTurnStore | None = None,
        tokenizers: dict[str, Any] | None = None,
    ) -> None:
        self.args = args
        self.kept = kept  # where finished turns' generated tokens are kept for token-exact replay
        self.preprocessor = preprocessor
        self.router = router
        catalog = args.catalog()
        handles = engine if isinstance(engine, dict) else {catalog[0].id: engine}
        self.engines = {model: h.options(stream=True) for model, h in handles.items()}
        self.unary_engines = dict(handles)  # per model, for calls that answer once (the admin route's loads)
        self.engine = next(iter(self.engines.values()))  # the default model's
        self.tokenizer = tokenizer
        self._tokenizers = tokenizers or {}
        # Sessions are keyed `<caller identity>/<session>` (and the model, in the catalog form): one caller's
        # header never describes another's turn, one model's turn never another's.
        self.doctor = PrefixDoctor.from_args(args, tokenizer)
        self.per_model_sessions = len(catalog) > 1
        self.speculative = SpeculativePrefill(
            preprocessor=preprocessor,
            router=router,
            engine=self.engines if len(self.engines) > 1 else self.engine,
            block_size={m.id: (m.engine or args.engine).block_size for m in catalog},
            enabled=args.router.speculative_prefill,
            max_in_flight=args.router.max_speculative_prefills,
        )
        self._releasing: set[asyncio.Task] = set()

    def engine_for(self, model: str) -> Any:
        """The streaming handle of `model`'s Engine deployment (the only one in the single-model form)."""
        if len(self.engines) == 1:
            return self.engine
        return self.engines[model]

    def tokenizer_for(self, model: str) -> Any:
        return self._tokenizers.get(model, self.tokenizer)

    def release(self, request_id: str, model: str | None = None) -> None:
        """Tell the router this request's lease is free. Sent from outside the request's Serve context: a handle
        call made in the context of a request Serve is cancelling (the client left) is a child request, and Serve
        cancels it with its parent before it is ever sent."""
        if model is None or len(self.engines) == 1:  # one model: the router needs no name
            contextvars.Context().run(self.router.release.remote, request_id)
        else:
            contextvars.Context().run(self.router.release.remote, request_id, model)

    def release_after(self, route_call: Any, request_id: str, model: str | None = None) -> None:
        """Release a lease whose routing call this ingress stopped waiting for (client gone, router died), once
        that call has ended. A release sent at once can reach the router before the call leases: the call waits
        in the admission queue and its cancellation races the release there, so the lease would be held until it
        lapses. Sent after the call's end (decision, refusal, or cancellation), the release always comes later."""
        task = asyncio.get_running_loop().create_task(
            self._release_when_ended(route_call, request_id, model), context=contextvars.Context()
        )
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _release_when_ended(self, route_call: Any, request_id: str, model: str | None) -> None:
        try:  # the decision, a refusal, or the call's cancellation: either way the router is done with it
            await asyncio.wait_for(route_call, self.args.router.max_wait_s + 5.0)
        except BaseException:  # noqa: BLE001 - how it ended does not matter, only that it did (or we gave up)
            pass
        self.release(request_id, model)


class RequestLifecycle:
    def __init__(
        self,
        path: RequestPath,
        request: GenerationRequest,
        model: ModelSpec,
        options: ParseOptions,
        *,
        api: str,
        scope: str,
        arrived: float,
        client_request_id: str | None = None,
        warm_only: bool = False,
    ) -> None:
        self._path = path
        # A pre-warm (a prefill the client asked for ahead of its turn): its output is not a turn of the session.
        self._warm_only = warm_only
        self.request = request
        self.model = model
        self._options = options
        self._api = api
        self._scope = scope  # the caller's identity: doctor sessions never mix callers
        self._arrived = arrived
        self._client_id = client_request_id
        self.pre: PreprocessedRequest | None = None
        self.route: RouteDecision | None = None
        self.report: PrefixReport | None = None
        self.post: Postprocessor | None = None
        self._stream: Any = None  # the engine's DeploymentResponseGenerator once opened
        self._pending: asyncio.Future | None = None
        self._owned_by_response = False
        self._ended_normally = False
        self._closed = False
        self._observer = StreamObserver(model.id)
        self._collector: TurnCollector | None = None  # the turn as sent (speculative prefill, kept turns)
        self._speculate = False
        self._unparsed = False  # a tool call the parser could not complete: the turn is not kept
        self._kept = False  # this turn was handed to the kept-turn store

    @property
    def id(self) -> str:
        return self.request.request_id

    # -- context manager: an exception anywhere before a response owns the request releases it -------------
    async def __aenter__(self) -> "RequestLifecycle":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if not self._owned_by_response:
            self.close()

    # -- admission -------------------------------------------------------------------------------------------
    async def admit(self) -> PreprocessedRequest:
        """Render and tokenize, then lease an engine slot: a saturated cluster answers 503/529 here, not
        inside a 200 stream. The prefix check runs beside the routing call, off the event loop."""
        bind_request_id(self.id)
        if self._client_id:
            logger.debug("request %s carries client id %s", self.id, self._client_id)
        started = time.perf_counter()
        # The base model travels with the served id, so an adapter loaded at run time needs no Preprocessor map.
        pre = await self._path.preprocessor.preprocess.remote(self.request, self._scope, self.model.id)
        routing = time.perf_counter()
        metrics.QUEUE_TIME.labels(pre.model, "preprocess").observe(routing - started)
        self.pre = pre
        session = self._session()
        check = (
            asyncio.ensure_future(self._path.doctor.check(session, pre.token_ids, pre.replay_last_rerendered))
            if session
            else None
        )
        route_call = self._path.router.route.remote(pre.route_request())
        try:
            self.route = await route_call
        except RequestError:  # refused (saturated): nothing was leased
            if check is not None:
                check.cancel()
            raise
        except BaseException:  # cancelled (client gone) or the router died: it may lease before or after we left
            if check is not None:
                check.cancel()
            self._path.release_after(route_call, self.id, pre.model)
            raise
        observe_route(self.route, time.perf_counter() - routing, self.model.id)
        if check is not None:
            self.report = await check
            observe_prefix(pre.model, self.report)
        if pre.replay_reordered:
            metrics.REPLAY_REORDERED.labels(pre.model).inc(pre.replay_reordered)
        for outcome, n in pre.replay_outcomes:
            metrics.REPLAY_TURNS.labels(pre.model, outcome).inc(n)
        self._speculate = self.request.hints.speculative_prefill and self._path.speculative.enabled
        if self._speculate or self._path.kept is not None:
            self._collector = TurnCollector()
        return pre

    def _session(self) -> str:
        if not (self.pre and self.pre.session_key):
            return ""
        if self._path.per_model_sessions:
            return f"{self._scope}/{self.request.model}/{self.pre.session_key}"
        return f"{self._scope}/{self.pre.session_key}"

    def headers(self) -> dict[str, str]:
        """`x-agentserve-prefix`: how much of the session's previous turn this prompt reuses, and why not all.
        `x-agentserve-max-tokens-clamped`: the max_tokens granted when the client asked for more than the window
        leaves after the prompt, as `<granted>; requested=<asked>`."""
        out = {"x-agentserve-prefix": self.report.header()} if self.report else {}
        if self.pre is not None and self.pre.requested_max_tokens is not None:
            out["x-agentserve-max-tokens-clamped"] = f"{self.pre.max_tokens}; requested={self.pre.requested_max_tokens}"
        return out

    # -- the engine stream ---------------------------------------------------------------------------------
    def _open(self) -> None:
        assert self.pre is not None and self.route is not None, "admit() first"
        pre, opts, model = self.pre, self._options, self.model
        reasoning = pre.parse_reasoning if opts.parse_reasoning is None else opts.parse_reasoning
        self.post = Postprocessor(
            self._path.tokenizer_for(model.id),
            reasoning_parser=model.reasoning_parser if reasoning else None,
            tool_call_parser=model.tool_call_parser if opts.parse_tool_calls else None,
            tools=opts.tools,
            stop=pre.sampling.stop,
            reasoning_started=pre.reasoning_started,
            skip_special_tokens=model.skip_special_tokens,
            id_factory=opts.id_factory,
        )
        self._stream = self._path.engine_for(model.id).generate.remote(pre, self.route)
        self._first_at: float | None = None
        self._last_at: float | None = None

    def _engine_failed(self, exc: BaseException) -> EngineDelta:
        logger.warning("engine stream for %s failed: %r", self.id, exc)
        if engine_died(exc) and self.route is not None and self.route.replica_id is not None:
            self._path.router.replica_failed.remote(self.route.replica_id)
        return EngineDelta(token_ids=[], finish_reason="error", error=f"engine failure: {type(exc).__name__}")

    def _events(self, delta: EngineDelta) -> list[Any]:
        """Postprocess one delta (ingress-side work: its exceptions are the ingress's, not the engine's)."""
        now = time.perf_counter()
        if self._first_at is None:
            self._first_at = now
            metrics.TTFT.labels(self._api, self.model.id).observe(now - self._arrived)
        elif delta.token_ids and self._last_at is not None:
            metrics.ITL.labels(self.model.id).observe((now - self._last_at) / len(delta.token_ids))
        self._last_at = now
        events = self.post.feed(delta)
        if delta.logprobs:  # before the text they belong to, so an encoder can attach them to it
            top = self.pre.sampling.logprobs or 0 if self.pre is not None else 0
            events = [logprobs_event(self._path.tokenizer_for(self.model.id), delta.logprobs, top), *events]
        if events:
            self._observer.events(events)
            if self._collector is not None:
                self._collector.feed(events)
                self._unparsed = self._unparsed or any(
                    isinstance(e, (ToolCallError, ToolCallTruncated)) for e in events
                )
        if self.post.finish_reason is not None:
            self._ended_normally = self.post.finish_reason in ("stop", "length")
        return events

    async def _next_delta(self, timeout: float | None) -> EngineDelta | None:
        """The next engine delta; None when `timeout` passed first (the pending read is kept for next time)."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._stream.__anext__())
        if timeout is not None:
            done, _ = await asyncio.wait((self._pending,), timeout=timeout)
            if not done:
                return None
        fut, self._pending = self._pending, None
        try:
            return await fut
        except StopAsyncIteration:
            return EngineDelta(token_ids=[], finish_reason="error", error="the engine stream ended early")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the engine side of the hop failed
            return self._engine_failed(exc)

    async def collect(self) -> list[Any]:
        """Every event of a non-streamed reply. Always closes the request."""
        try:
            self._open()
            out: list[Any] = []
            while self.post.finish_reason is None:
                delta = await self._next_delta(None)
                out.extend(self._events(delta))
            await self._keep_turn()
            return out
        finally:
            self.close()

    def streaming_response(
        self,
        wire: WireStream,
        *,
        headers: dict[str, str] | None = None,
        before_end: Callable[[], Awaitable[None]] | None = None,
    ) -> StreamingResponse:
        """The SSE response; from here the response owns the request and closes it however it ends.
        `before_end` runs once the turn has ended, before its last bytes go out (e.g. storing the response, so
        a follow-up that the client sends the moment it sees the end finds it)."""
        self._owned_by_response = True
        return _LifecycleResponse(
            self,
            self._sse(wire, before_end),
            media_type="text/event-stream",
            headers={**SSE_HEADERS, **self.headers(), **(headers or {})},
        )

    def chunks(
        self, wire: WireStream, *, before_end: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[Any]:
        """What `wire` makes of the stream, chunk by chunk, for a transport that writes it itself (a WebSocket).
        The caller owns the iterator: the request is closed when it ends or is closed (`aclose()`)."""
        return self._sse(wire, before_end)

    async def _sse(
        self, wire: WireStream, before_end: Callable[[], Awaitable[None]] | None
    ) -> AsyncIterator[bytes]:
        interval = self._path.args.keepalive_interval_s
        try:
            yield wire.opening()
            self._open()
            while True:
                delta = await self._next_delta(interval)
                if delta is None:  # a long prefill or a gap: tell idle-timeout clients we are alive
                    yield wire.keepalive()
                    continue
                try:
                    chunk = wire.encode(self._events(delta))
                except Exception as exc:  # noqa: BLE001 - an ingress bug ends this request only
                    logger.exception("request %s: postprocessing failed", self.id)
                    yield wire.failure(RequestError("internal", f"stream failed: {type(exc).__name__}"))
                    return
                if self.post.finish_reason is not None:
                    await self._keep_turn()
                    if before_end is not None:
                        try:
                            await before_end()
                        except Exception:  # noqa: BLE001 - e.g. the store is down: the turn itself still ends
                            logger.exception("request %s: end-of-turn step failed", self.id)
                    yield chunk + wire.closing()
                    return
                if chunk:
                    yield chunk
        finally:
            self.close()

    async def _keep_turn(self) -> None:
        """Keep the finished turn's generated tokens under its content key (token-exact replay). The batch is
        written on the store's thread; the end of the stream waits for it at most `commit_wait_s`, so a follow-up
        sent the moment the client sees the end finds it. Turns cut short (length, stop string, error) or whose
        tool call did not parse are not kept: their tokens do not decode to what the client was sent."""
        kept, pre, post = self._path.kept, self.pre, self.post
        if kept is None or pre is None or post is None or self._collector is None or self._warm_only:
            return
        if post.finish_reason != "stop" or post.stopped or self._unparsed or not pre.replay_prefix:
            return
        turn = self._collector.turn()
        if turn is None or not post.output_ids:
            return
        done = kept.put(key_after(pre.replay_prefix, turn), pre.token_ids, list(post.output_ids))
        self._kept = True
        wait = self._path.args.kept_turns.commit_wait_s
        try:
            stored = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(done)), wait) if wait > 0 else None
        except asyncio.TimeoutError:
            stored = None
        metrics.KEPT_TURNS.labels(pre.model, {True: "kept", False: "refused", None: "pending"}[stored]).inc()

    # -- the end -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release everything this request holds. Synchronous and idempotent: safe in any `finally`."""
        if self._closed:
            return
        self._closed = True
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if self._stream is not None and (self.post is None or self.post.finish_reason is None):
            self._stream.cancel()  # the turn did not end: abort the engine request (a finished one ends itself)
        if not self._ended_normally and self.route is not None:
            # The engine reports its own ends; this covers requests it may never have seen.
            self._path.release(self.id, self.model.id)
        post = self.post
        if post is None:
            return
        self._observer.finished()
        model = self.model.id
        metrics.PROMPT_TOKENS.labels(model).inc(post.prompt_tokens)
        metrics.CACHED_TOKENS.labels(model).inc(post.cached_tokens)
        metrics.COMPLETION_TOKENS.labels(model).inc(post.completion_tokens)
        if post.prompt_tokens:
            metrics.CACHED_RATIO.labels(model).observe(post.cached_tokens / post.prompt_tokens)
        if self._ended_normally and self.pre is not None and not self._warm_only:
            session = self._session()
            if session:
                self._path.doctor.record(session, self.pre.token_ids, post.output_ids)
            if self._collector is not None and self._speculate:
                generated = [*self.pre.token_ids, *post.output_ids] if self._kept else None
                self._path.speculative.after(self.request, self.pre, self.route, self._collector, generated)


class _LifecycleResponse(StreamingResponse):
    """A StreamingResponse that closes its request however the response ends, even if the body never starts."""

    def __init__(self, lifecycle: RequestLifecycle, content: AsyncIterator[bytes], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._lifecycle = lifecycle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._lifecycle.close()
