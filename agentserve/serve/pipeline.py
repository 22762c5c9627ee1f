"""The request path shared by every API: preprocess -> route -> engine stream -> postprocess.

It turns one GenerationRequest into batches of StreamEvents and owns the request's lifetime:
a consumer that stops early (client gone, stop string) cancels the engine stream, which aborts
the engine request; the router is always told the request ended.
"""

from __future__ import annotations

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
from agentserve.protocol import EngineDelta, GenerationRequest, PreprocessedRequest
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
    ) -> None:
        self._pre = preprocessor
        self._router = router
        self._engine = engine.options(stream=True)
        self._tokenizer = tokenizer
        self._doctor = SessionTracker(tokenizer.decode, frozenset(tokenizer.all_special_ids))
        self._reports: OrderedDict[str, PrefixReport] = OrderedDict()
        self._trace = TraceWriter(trace_path) if trace_path else None

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

    async def events(
        self,
        pre: PreprocessedRequest,
        model: ModelSpec,
        options: ParseOptions,
        *,
        api: str,
        arrived: float,
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
        route = await self._router.route.remote(pre)
        observe_route(route, time.perf_counter() - routing, model.id)
        stream = self._engine.generate.remote(pre, route)
        observer = StreamObserver(model.id)
        last = None
        try:
            try:
                async for delta in stream:
                    now = time.perf_counter()
                    if last is None:
                        metrics.TTFT.labels(api, model.id).observe(now - arrived)
                    elif delta.token_ids:
                        metrics.ITL.labels(model.id).observe((now - last) / len(delta.token_ids))
                    last = now
                    events = post.feed(delta)
                    if events:
                        observer.events(events)
                        yield events
                    if post.finish_reason is not None:
                        break
            except Exception as exc:  # the engine replica died or failed mid-stream
                logger.warning("engine stream for %s failed: %r", pre.request_id, exc)
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
