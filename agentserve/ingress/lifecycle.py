"""One generation request's life, the same for every wire API: admit -> engine stream -> request state -> release.

`RequestPath` is the ingress replica's shared half (deployment handles, tokenizers, the prefix doctor, the
observers); `RequestLifecycle` is one request and owns only the resources it holds: its router lease and its
engine stream. Its output lives in one `RequestState` (ingress/output/request_state.py); what watches it (metrics,
the prefix doctor, kept turns, speculative prefill) subscribes to the one `TurnEnded` event it emits
(ingress/observers). Every exit (normal end, client gone at any stage, engine failure, ingress error, timeout)
goes through `close()`, which is synchronous and idempotent so it can run from any `finally`. Each API contributes
only a decoder (before the lifecycle starts) and a `WireStream` encoder (bytes in its own idiom).

    async with RequestLifecycle(path, gen, model, options, api="chat", scope=caller, arrived=t0) as life:
        await life.admit()                      # 4xx / 503 here, before any byte is sent
        return life.streaming_response(wire)    # or: events = await life.collect()

Only an engine replica's death marks it failed in the router (`RequestPath.engine_died` tells it apart); an
exception in the ingress's own code (detokenizer, parsers, encoders) ends that one request with its API's error
and a log line.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Generic, Protocol, Sequence, TypeVar

from ray.exceptions import RayActorError
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from agentserve import metrics
from agentserve.config import ModelSpec, ServeArgs
from agentserve.doctor import PrefixDoctor, PrefixReport
from agentserve.doctor.prefix_doctor import REPORT_WAIT_S
from agentserve.ingress.http import SSE_HEADERS
from agentserve.ingress.observers import Timings, TurnEnded, TurnObserver
from agentserve.ingress.observers.request_traces import end_request_span
from agentserve.ingress.observers.telemetry import StreamObserver, bind_request_id, observe_prefix, observe_route
from agentserve.ingress.output.request_state import RequestState
from agentserve.ingress.sent_conversations import SentConversations
from agentserve.protocol import (
    Conversation, EngineDelta, GenerationRequest, Preprocessed, RouteDecision, SessionAffinity, caller_session,
)
from agentserve.protocol.errors import RequestError
from agentserve.serve.deployments.router_calls import RouterCalls
from agentserve.traces.otel import NO_SPANS, NULL_SPAN, Spans

logger = logging.getLogger("ray.serve")

C = TypeVar("C", covariant=True)

_NO_TURNS = Conversation(turns=())  # a request whose conversation crosses as a delta beside it
ROUTE_ATTEMPTS = 2  # a Router replica dying under a route call: once more, on another (serve/deployments/router_calls.py)


@dataclass(frozen=True)
class ParseOptions:
    """How to parse one request's output (decided by the API from the request)."""

    tools: list[dict[str, Any]]
    parse_tool_calls: bool = True
    # None: as the request's thinking switch says; True: always (the API's encoder decides what to show).
    parse_reasoning: bool | None = None
    id_factory: Callable[[], str] | None = None


class WireStream(Protocol, Generic[C]):
    """What an API contributes to a streamed reply, in its own idiom: `C` is bytes for SSE, a list of text frames
    for a WebSocket."""

    def opening(self) -> C: ...

    def encode(self, events: list[Any]) -> C: ...

    def keepalive(self) -> C: ...

    def failure(self, err: RequestError) -> C: ...

    def closing(self) -> C: ...


SSE_COMMENT_KEEPALIVE = b": keep-alive\n\n"  # valid SSE that every client's parser skips


def _never_died(exc: BaseException) -> bool:
    return False


class RequestPath:
    """The ingress replica's shared request path: one per replica, one `RequestLifecycle` per request.

    `engines` and `tokenizers` are keyed by catalog model id (the resolved catalog's, one entry or many: nothing
    here knows which config form it came from). `engine_died(exc)` tells an engine replica's death from any other
    failure of its stream (the deployment gives Ray's test for it)."""

    def __init__(
        self,
        args: ServeArgs,
        *,
        preprocessor: Any,
        router: Any,
        engines: dict[str, Any],
        tokenizers: dict[str, Any],
        doctor: PrefixDoctor,
        observers: Sequence[TurnObserver] = (),
        engine_died: Callable[[BaseException], bool] = _never_died,
        spans: Spans = NO_SPANS,
    ) -> None:
        self.args = args
        self.spans = spans  # OpenTelemetry request spans (traces/otel.py): NO_SPANS without an OTLP endpoint
        self.preprocessor = preprocessor
        self.router = router
        self.routers = RouterCalls(router)  # calls for one Router replica, or for every one
        self.engines = {model: h.options(stream=True) for model, h in engines.items()}
        self.unary_engines = dict(engines)  # per model, for calls that answer once (the admin route's loads)
        self.tokenizers = dict(tokenizers)
        self.doctor = doctor
        self.observers = tuple(observers)
        self.engine_died = engine_died
        for observer in self.observers:
            attach = getattr(observer, "attach", None)
            if attach is not None:  # an observer that issues requests of its own (speculative prefill)
                attach(self)
        self._releasing: set[asyncio.Task] = set()
        self.sent = SentConversations(args.kept_turns.conversation_memo_bytes)

    async def preprocess(self, request: GenerationRequest, scope: str, model: str) -> Preprocessed:
        """The Preprocessor's answer, from the replica that holds the session (serve/deployments/session_affinity.py);
        a session's conversation crosses as its new turns where the replica holds the rest
        (ingress/sent_conversations.py), else whole."""
        session = request.session_key()
        call = self.preprocessor.preprocess.remote
        affinity = SessionAffinity(key=caller_session(scope, session)) if session else None
        shipment = self.sent.ship(scope, model, session, request.conversation)
        if shipment is None:
            metrics.CONVERSATION_CROSSINGS.labels("whole").inc()
            return await call(request, scope, model, affinity=affinity)
        form = "whole"
        if shipment.delta is not None:
            stub = request.model_copy(update={"conversation": _NO_TURNS})
            pre = await call(stub, scope, model, shipment.delta, shipment.keep, affinity=affinity)
            if pre is not None:
                metrics.CONVERSATION_CROSSINGS.labels("delta").inc()
                return pre
            form = "resent"
        metrics.CONVERSATION_CROSSINGS.labels(form).inc()
        return await call(request, scope, model, None, shipment.keep, affinity=affinity)

    def tokenizer_for(self, model: str) -> Any:
        return self.tokenizers[model]

    def release(self, request_id: str, model: str, router_id: str | None = None) -> None:
        """Tell the Router replica that leased this request (`router_id`; None: not known, so every one) that its
        lease is free. Sent from outside the request's Serve context: a handle call made in the context of a
        request Serve is cancelling (the client left) is a child request, and Serve cancels it with its parent
        before it is ever sent."""
        if router_id is not None:
            contextvars.Context().run(self.routers.to, router_id, "release", request_id, model)
        else:
            contextvars.Context().run(self.routers.each_nowait, "release", request_id, model)

    def release_after(self, route_call: Any, request_id: str, model: str) -> None:
        """Release a lease whose routing call this ingress stopped waiting for (client gone, router died), once
        that call has ended. A release sent at once can reach the router before the call leases: the call waits
        in the admission queue and its cancellation races the release there, so the lease would be held until it
        lapses. Sent after the call's end (decision, refusal, or cancellation), the release always comes later."""
        task = asyncio.get_running_loop().create_task(
            self._release_when_ended(route_call, request_id, model), context=contextvars.Context()
        )
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _release_when_ended(self, route_call: Any, request_id: str, model: str) -> None:
        try:  # the decision, a refusal, or the call's cancellation: either way the router is done with it
            await asyncio.wait_for(route_call, self.args.router.max_wait_s + 5.0)
        except BaseException:  # noqa: BLE001 - how it ended does not matter, only that it did (or we gave up)
            pass
        self.release(request_id, model)

    async def prefill(self, request: GenerationRequest, model: ModelSpec | str, prepared: Preprocessed, replica: str) -> None:
        """Run a prepared prefill-only request on `replica` through the same lifecycle as every request (speculative
        prefill); a saturated or vanished replica skips it."""
        model_id = model if isinstance(model, str) else model.id
        gen = request.model_copy(update={"request_id": prepared.engine.request_id})
        life = RequestLifecycle(
            self, gen, model_id, ParseOptions(tools=[], parse_tool_calls=False, parse_reasoning=False),
            api="speculative_prefill", scope="", arrived=time.perf_counter(), warm_only=True, metered=False,
        )
        async with life:
            if await life.admit_prepared(prepared, replica):
                await life.collect()


class RequestLifecycle:
    def __init__(
        self,
        path: RequestPath,
        request: GenerationRequest,
        model: ModelSpec | str,
        options: ParseOptions,
        *,
        api: str,
        scope: str,
        arrived: float,
        client_request_id: str | None = None,
        warm_only: bool = False,
        metered: bool = True,  # False: work the server chose to do (speculation), not in the request metrics
    ) -> None:
        self._path = path
        self._metered = metered
        # A pre-warm (a prefill the client or speculation asked for ahead of a turn): not a turn of the session.
        self._warm_only = warm_only
        self.request = request
        self.model_id = model if isinstance(model, str) else model.id  # the catalog model that serves it
        self._model = model if isinstance(model, ModelSpec) else None
        self._options = options
        self._api = api
        self._scope = scope  # the caller's identity: doctor sessions never mix callers
        self._arrived = arrived
        self._client_id = client_request_id
        self.pre: Preprocessed | None = None
        self.route: RouteDecision | None = None
        self.report: PrefixReport | None = None
        self.state: RequestState | None = None
        self._stream: Any = None  # the engine's DeploymentResponseGenerator once opened
        self._pending: asyncio.Future | None = None
        self._owned_by_response = False
        self._ended_normally = False
        self._turn_ended = False
        self._closed = False
        self._telemetry = StreamObserver(self.model_id)
        self._first_at: float | None = None
        self._last_at: float | None = None
        self._routed_at: float | None = None
        self._arrived_unix = time.time() - (time.perf_counter() - arrived)
        self._span = NULL_SPAN  # the request's root span (traces/otel.py)
        self._ended: TurnEnded | None = None

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
    async def admit(self) -> Preprocessed:
        """Render and tokenize, then lease an engine slot: a saturated cluster answers 503/529 here, not
        inside a 200 stream. The prefix check runs beside the routing call, off the event loop, and is never
        waited on past it (REPORT_WAIT_S)."""
        bind_request_id(self.id)
        if self._metered and self._path.spans.enabled:
            self._trace()
        if self._client_id:
            logger.debug("request %s carries client id %s", self.id, self._client_id)
        started = time.perf_counter()
        # The base model travels with the served id, so an adapter loaded at run time needs no Preprocessor map.
        pre = await self._path.preprocess(self.request, self._scope, self.model_id)
        routing = time.perf_counter()
        metrics.QUEUE_TIME.labels(self.model_id, "preprocess").observe(routing - started)
        self.pre = pre
        if self._metered and not self._warm_only:
            metrics.REQUESTS_BY_KIND.labels(self._api, self.model_id, self.request.hints.kind).inc()
        session = self._session()
        # The counts now; the cause on the doctor's worker, taken only if it is named while routing is out (plus
        # a few ms): admission never waits on a diagnosis (doctor/prefix_doctor.py).
        check = (  # a compaction is a new prefix by design: nothing to diagnose
            self._path.doctor.start(session, pre.engine.token_ids, pre.report.replay_last_rerendered)
            if session and self.request.hints.kind != "compaction"
            else None
        )
        affinity = SessionAffinity(key=pre.route.session_key) if pre.route.session_key else None
        for attempt in range(ROUTE_ATTEMPTS):
            route_call = self._path.router.route.remote(pre.route, affinity)  # a session's placements: one Router
            try:
                self.route = await route_call
                break
            except RequestError:  # refused (saturated): nothing was leased
                if check is not None:
                    check.cancel()
                raise
            except RayActorError:  # that Router replica died: its leases died with it; Serve now skips it
                logger.warning("router replica lost while routing %s (attempt %d)", self.id, attempt + 1)
                if attempt + 1 == ROUTE_ATTEMPTS:
                    if check is not None:
                        check.cancel()
                    raise
            except BaseException:  # cancelled (client gone): the router may lease before or after we left
                if check is not None:
                    check.cancel()
                self._path.release_after(route_call, self.id, self.model_id)
                raise
        self._routed_at = time.perf_counter()
        observe_route(self.route, self._routed_at - routing, self.model_id)
        if check is not None:
            self.report = await check.report(REPORT_WAIT_S)
            observe_prefix(self.model_id, self.report)
        if pre.report.replay_reordered:
            metrics.REPLAY_REORDERED.labels(self.model_id).inc(pre.report.replay_reordered)
        for outcome, n in pre.report.replay_outcomes:
            metrics.REPLAY_TURNS.labels(self.model_id, outcome).inc(n)
        return pre

    async def admit_prepared(self, prepared: Preprocessed, replica: str) -> bool:
        """Admission for a request prepared in the ingress (speculative prefill), pinned to `replica`: False when
        that replica is saturated or gone (nothing was leased)."""
        self.pre = prepared
        affinity = SessionAffinity(key=prepared.route.session_key) if prepared.route.session_key else None
        route_call = self._path.router.route_to.remote(prepared.route, replica, affinity)
        try:
            self.route = await route_call
        except BaseException:
            self._path.release_after(route_call, self.id, self.model_id)
            raise
        self._routed_at = time.perf_counter()
        return self.route is not None

    def _trace(self) -> None:
        """Open the request's root span; its context travels in the hints to the Preprocessor and the Router (and
        from there in the engine request)."""
        hints = self.request.hints
        self._span = self._path.spans.request(
            "ingress.request", self._arrived_unix, hints.session_id,
            {"agentserve.request_id": self.id, "agentserve.api": self._api, "agentserve.model": self.model_id},
        )
        if self._span.trace is not None:
            self.request = self.request.model_copy(update={"hints": hints.model_copy(update={"trace": self._span.trace})})

    def _session(self) -> str:
        if not (self.pre and self.pre.report.session_key):
            return ""
        return f"{self._scope}/{self.request.model}/{self.pre.report.session_key}"

    def headers(self) -> dict[str, str]:
        """`x-agentserve-prefix`: how much of the session's previous turn this prompt reuses, and why not all.
        `x-agentserve-max-tokens-clamped`: the max_tokens granted when the client asked for more than the window
        leaves after the prompt, as `<granted>; requested=<asked>`."""
        prefix = self._path.doctor.header(self.report)
        out = {"x-agentserve-prefix": prefix} if prefix else {}
        if self.pre is not None and self.pre.report.requested_max_tokens is not None:
            granted, asked = self.pre.engine.max_tokens, self.pre.report.requested_max_tokens
            out["x-agentserve-max-tokens-clamped"] = f"{granted}; requested={asked}"
        return out

    # -- the engine stream ---------------------------------------------------------------------------------
    def _open(self) -> None:
        assert self.pre is not None and self.route is not None, "admit() first"
        pre, opts, model = self.pre, self._options, self._model
        reasoning = pre.report.parse_reasoning if opts.parse_reasoning is None else opts.parse_reasoning
        self.state = RequestState(
            self._path.tokenizer_for(self.model_id),
            reasoning_parser=model.reasoning_parser if model is not None and reasoning else None,
            tool_call_parser=model.tool_call_parser if model is not None and opts.parse_tool_calls else None,
            tools=opts.tools,
            stop=pre.engine.sampling.stop,
            reasoning_started=pre.engine.reasoning_started,
            skip_special_tokens=model.skip_special_tokens if model is not None else True,
            id_factory=opts.id_factory,
            top_logprobs=pre.engine.sampling.logprobs or 0,
            length_finish=model.max_output_tokens_finish if model is not None and pre.report.capped_by_server
            else "length",
            repetition=model.stop_repetition if model is not None else None,
        )
        self._stream = self._path.engines[self.model_id].generate.remote(pre.engine, self.route)

    def _engine_failed(self, exc: BaseException) -> EngineDelta:
        logger.warning("engine stream for %s failed: %r", self.id, exc)
        if not self._path.engine_died(exc):
            return EngineDelta(token_ids=[], finish_reason="error", error=f"engine failure: {type(exc).__name__}")
        if self.route is not None and self.route.replica_id is not None:
            self._path.routers.each_nowait("replica_failed", self.route.replica_id)
        # What the client can act on: the turn is lost with its replica, another replica serves the retry.
        return EngineDelta(token_ids=[], finish_reason="error",
                           error="the engine replica serving this request was lost; retry the request")

    def _events(self, delta: EngineDelta) -> list[Any]:
        """One delta through the request state (ingress-side work: its exceptions are the ingress's, not the
        engine's)."""
        now = time.perf_counter()
        if self._first_at is None:
            self._first_at = now
            if self._metered:
                metrics.TTFT.labels(self._api, self.model_id).observe(now - self._arrived)
        elif delta.token_ids and self._last_at is not None and self._metered:
            metrics.ITL.labels(self.model_id).observe((now - self._last_at) / len(delta.token_ids))
        self._last_at = now
        assert self.state is not None
        events = self.state.feed(delta)
        if events and self._metered:
            self._telemetry.events(events)
        if self.state.finish_reason is not None:
            self._ended_normally = self.state.finish_reason in ("stop", "length")
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
            assert self.state is not None
            out: list[Any] = []
            while self.state.finish_reason is None:
                delta = await self._next_delta(None)
                out.extend(self._events(delta))
            await self._end_turn()
            return out
        finally:
            self.close()

    def streaming_response(
        self,
        wire: WireStream[bytes],
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
            self._chunks(wire, before_end),
            media_type="text/event-stream",
            headers={**SSE_HEADERS, **self.headers(), **(headers or {})},
        )

    def chunks(
        self, wire: WireStream[C], *, before_end: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[C]:
        """What `wire` makes of the stream, chunk by chunk, for a transport that writes it itself (a WebSocket).
        The caller owns the iterator: the request is closed when it ends or is closed (`aclose()`)."""
        return self._chunks(wire, before_end)

    async def _chunks(self, wire: WireStream[Any], before_end: Callable[[], Awaitable[None]] | None) -> AsyncIterator[Any]:
        interval = self._path.args.keepalive_interval_s
        try:
            yield wire.opening()
            self._open()
            assert self.state is not None
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
                if self.state.finish_reason is not None:
                    await self._end_turn()
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

    # -- the end -------------------------------------------------------------------------------------------
    def _turn_ended_event(self) -> TurnEnded:
        return TurnEnded(
            request=self.request,
            model=self.model_id,
            prepared=self.pre,
            route=self.route,
            state=self.state,
            session="" if self._warm_only else self._session(),
            warm_only=self._warm_only,
            metered=self._metered,
            api=self._api,
            scope=self._scope,
            timings=Timings(self._arrived_unix, self._arrived, self._routed_at, self._first_at, time.perf_counter()),
        )

    def _emit(self) -> list[Awaitable[None]]:
        """Tell every observer the request ended, once; what they hand back, the end of the stream waits for."""
        if self._turn_ended:
            return []
        self._turn_ended = True
        self._telemetry.finished()
        ended = self._ended = self._turn_ended_event()
        waits: list[Awaitable[None]] = []
        for observer in self._path.observers:
            try:
                result = observer.turn_ended(ended)
            except Exception:  # noqa: BLE001 - an observer's failure never fails the request
                logger.exception("request %s: observer %s failed", self.id, type(observer).__name__)
                continue
            if inspect.isawaitable(result):
                waits.append(result)
        return waits

    async def _end_turn(self) -> None:
        """The turn ended: observers store what the next turn needs before the last bytes go out."""
        for wait in self._emit():
            try:
                await wait
            except Exception:  # noqa: BLE001
                logger.exception("request %s: end-of-turn observer failed", self.id)

    def close(self) -> None:
        """Release everything this request holds. Synchronous and idempotent: safe in any `finally`."""
        if self._closed:
            return
        self._closed = True
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if self._stream is not None and (self.state is None or self.state.finish_reason is None):
            self._stream.cancel()  # the turn did not end: abort the engine request (a finished one ends itself)
        if not self._ended_normally and self.route is not None:
            # The engine reports its own ends; this covers requests it may never have seen.
            self._path.release(self.id, self.model_id, self.route.router_id)
        if self.state is not None:
            for wait in self._emit():  # an end not reached in the stream (client gone, failure): nothing to wait for
                if asyncio.isfuture(wait) or inspect.iscoroutine(wait):
                    asyncio.ensure_future(wait)
        if self._span is not NULL_SPAN:
            end_request_span(self._span, self._ended)


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
