"""The request path shared by every API: preprocess -> route -> engine stream -> postprocess.

It turns one GenerationRequest into batches of StreamEvents and owns the request's lifetime:
a consumer that stops early (client gone, stop string) cancels the engine stream, which aborts
the engine request; the router is always told the request ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from ray.serve.handle import DeploymentHandle

from agentserve import metrics
from agentserve.config import ModelSpec
from agentserve.doctor import PrefixReport, SessionTracker
from agentserve.doctor.trace import TraceTurn, TraceWriter
from agentserve.postprocess import Postprocessor
from agentserve.serve.speculative import TurnCollector, next_turn_prefix, prefill_request
from agentserve.protocol import EngineDelta, GenerationRequest, PreprocessedRequest, RouteDecision
from agentserve.serve.observe import StreamObserver, bind_request_id, observe_route

logger = logging.getLogger("ray.serve")


@dataclass(frozen=True)
class ParseOptions:
    """How to parse one request's output (decided by the API from the request)."""

    tools: list[dict[str, Any]]
    parse_tool_calls: bool = True
    parse_reasoning: bool = True
    id_factory: Callable[[], str] | None = None


class Pipeline:
    def __init__(
        self,
        *,
        preprocessor: DeploymentHandle,
        router: DeploymentHandle,
        engine: DeploymentHandle,
        tokenizer: Any,
        trace_path: str | None = None,
        block_size: int = 128,  # the engine's, for speculative prefill requests
        speculative_prefill: bool = True,
    ) -> None:
        self._pre = preprocessor
        self._router = router
        self._engine = engine.options(stream=True)
        self._tokenizer = tokenizer
        self._doctor = SessionTracker(tokenizer.decode, frozenset(tokenizer.all_special_ids))
        self._reports: OrderedDict[str, PrefixReport] = OrderedDict()
        self._trace = TraceWriter(trace_path) if trace_path else None
        self._block_size = block_size
        self._spec_enabled = speculative_prefill
        self._speculative: OrderedDict[str, GenerationRequest] = OrderedDict()
        self._spec_tasks: set[asyncio.Task] = set()

    async def prepare(self, request: GenerationRequest) -> PreprocessedRequest:
        bind_request_id(request.request_id)
        started = time.perf_counter()
        pre = await self._pre.preprocess.remote(request)
        metrics.QUEUE_TIME.labels(pre.model, "preprocess").observe(time.perf_counter() - started)
        report = self._doctor.check(pre.session_key, pre.token_ids)
        if report is not None:
            self._reports[pre.request_id] = report
            while len(self._reports) > 10_000:  # requests that failed before streaming
                self._reports.popitem(last=False)
            metrics.PREFIX_REUSE.labels(pre.model).observe(report.reuse_ratio)
            if report.cause is not None:
                metrics.PREFIX_DIVERGENCES.labels(pre.model, report.cause).inc()
        if pre.replay_reordered:
            metrics.REPLAY_REORDERED.labels(pre.model).inc(pre.replay_reordered)
        return pre

    def prefix_headers(self, pre: PreprocessedRequest) -> dict[str, str]:
        """`x-agentserve-prefix`: how much of the session's previous turn this prompt reuses, and why not all."""
        report = self._reports.get(pre.request_id)
        return {"x-agentserve-prefix": report.header()} if report else {}

    async def admit(self, pre: PreprocessedRequest, request: GenerationRequest | None = None) -> RouteDecision:
        """Route now, before any response bytes: a saturated cluster raises RequestError('overloaded')
        (503/529 with Retry-After) instead of failing inside a 200 stream. Pass the request to enable
        its `speculative_prefill` hint."""
        if request is not None and request.hints.speculative_prefill and self._spec_enabled:
            self._speculative[pre.request_id] = request
            while len(self._speculative) > 10_000:
                self._speculative.popitem(last=False)
        return await self._router.route.remote(pre)

    def _speculate(
        self, pre: PreprocessedRequest, route: RouteDecision, collector: TurnCollector, request: GenerationRequest
    ) -> None:
        turn = collector.turn()
        if request is None or turn is None or route.replica_id is None:
            return
        task = asyncio.get_running_loop().create_task(self._prefill_next(request, pre, route.replica_id, turn))
        self._spec_tasks.add(task)
        task.add_done_callback(self._spec_tasks.discard)

    async def _prefill_next(
        self, request: GenerationRequest, pre: PreprocessedRequest, replica: str, turn: Any
    ) -> None:
        try:
            conv = next_turn_prefix(request.conversation, turn)
            ids = await self._pre.render_tokens.remote(conv, dict(request.template_kwargs), False)
            spec = prefill_request(pre.request_id, pre.model, ids, self._block_size, pre.hints)
            route = await self._router.route_to.remote(spec, replica)
            if route is None:
                return
            try:
                async for _ in self._engine.generate.remote(spec, route):
                    pass
            finally:
                self._router.release.remote(spec.request_id)
        except Exception:
            logger.warning("speculative prefill after %s failed", pre.request_id, exc_info=True)

    async def events(
        self,
        pre: PreprocessedRequest,
        model: ModelSpec,
        options: ParseOptions,
        *,
        api: str,
        arrived: float,
        route: RouteDecision | None = None,  # from admit(); None routes here
    ) -> AsyncIterator[list[Any]]:
        post = Postprocessor(
            self._tokenizer,
            reasoning_parser=model.reasoning_parser
            if options.parse_reasoning and pre.parse_reasoning
            else None,
            tool_call_parser=model.tool_call_parser if options.parse_tool_calls else None,
            tools=options.tools,
            stop=pre.sampling.stop,
            reasoning_started=pre.reasoning_started,
            skip_special_tokens=model.skip_special_tokens,
            id_factory=options.id_factory,
        )
        routing = time.perf_counter()
        route = route or await self._router.route.remote(pre)
        observe_route(route, time.perf_counter() - routing, model.id)
        stream = self._engine.generate.remote(pre, route)
        observer = StreamObserver(model.id)
        last = None
        spec = self._speculative.pop(pre.request_id, None)
        collector = TurnCollector() if spec is not None else None
        try:
            try:
                async for delta in stream:
                    now = time.perf_counter()
                    if last is None:
                        metrics.TTFT.labels(api, model.id).observe(now - arrived)
                        self._router.first_token.remote(pre.request_id)
                    elif delta.token_ids:
                        metrics.ITL.labels(model.id).observe((now - last) / len(delta.token_ids))
                    last = now
                    events = post.feed(delta)
                    if collector is not None and events:
                        collector.feed(events)
                    if events:
                        observer.events(events)
                        yield events
                    if post.finish_reason is not None:
                        break
            except Exception as exc:  # the engine replica died or failed mid-stream
                logger.warning("engine stream for %s failed: %r", pre.request_id, exc)
                if route.replica_id is not None:
                    self._router.replica_failed.remote(route.replica_id)
                error = EngineDelta(token_ids=[], finish_reason="error", error=f"engine failure: {exc}")
                yield post.feed(error)
            if post.finish_reason is None:
                yield post.feed(
                    EngineDelta(token_ids=[], finish_reason="error", error="engine stream ended early")
                )
            observer.finished()
            if post.finish_reason in ("stop", "length"):
                self._doctor.record(pre.session_key, pre.token_ids, post.output_ids)
                if self._trace is not None:
                    self._trace.write(TraceTurn(pre.session_key, pre.token_ids, post.output_ids))
            metrics.PROMPT_TOKENS.labels(model.id).inc(post.prompt_tokens)
            metrics.CACHED_TOKENS.labels(model.id).inc(post.cached_tokens)
            metrics.COMPLETION_TOKENS.labels(model.id).inc(post.completion_tokens)
            if post.prompt_tokens:
                metrics.CACHED_RATIO.labels(model.id).observe(post.cached_tokens / post.prompt_tokens)
        finally:
            self._reports.pop(pre.request_id, None)
            stream.cancel()  # no-op when finished; aborts the engine request otherwise
            self._router.release.remote(pre.request_id)
            if collector is not None and post.finish_reason in ("stop", "length"):
                self._speculate(pre, route, collector, spec)
