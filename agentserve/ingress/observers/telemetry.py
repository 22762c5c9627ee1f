"""Per-request observations the request lifecycle makes: request id into Serve's logs, route, parser and tool timing.

Kept out of lifecycle.py so the request path reads as the request path.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from agentserve import metrics
from agentserve.doctor import PrefixReport
from agentserve.protocol import RouteDecision
from agentserve.protocol.events import ToolCallEnd, ToolCallError, ToolCallTruncated

logger = logging.getLogger("ray.serve")


def bind_request_id(request_id: str) -> None:
    """Make agentserve's request id Ray Serve's request id for the rest of this request.

    Serve stamps `request_id` on every log record of the request and carries it into every downstream
    handle call (preprocessor, router, engine), so one id finds the request in every replica's logs and
    matches the `request-id` response header.
    """
    try:
        from ray.serve import context

        current = context._get_serve_request_context()
        if current.request_id != request_id:
            context._serve_request_context.set(dataclasses.replace(current, request_id=request_id))
    except Exception:  # outside a replica, or Serve internals moved: logs keep Serve's own id
        pass


def observe_prefix(model: str, report: PrefixReport | None) -> None:
    if report is None:
        return
    metrics.PREFIX_REUSE.labels(model).observe(report.reuse_ratio)
    if report.cause is not None:
        metrics.PREFIX_DIVERGENCES.labels(model, report.cause).inc()


def observe_route(route: RouteDecision, waited_s: float, model: str) -> None:
    metrics.QUEUE_TIME.labels(model, "route").observe(waited_s)
    metrics.ROUTE_DECISIONS.labels(model, route.reason).inc()
    metrics.ROUTE_OVERLAP.labels(model).observe(route.overlap_blocks)


class StreamObserver:
    """Parser errors as they happen; tool-dispatch lead time (call announced -> turn end) at the end."""

    def __init__(self, model: str, clock=time.perf_counter) -> None:
        self._model = model
        self._clock = clock
        self._tool_ends: list[float] = []

    def events(self, events: list[Any]) -> None:
        for ev in events:
            if isinstance(ev, ToolCallEnd):
                self._tool_ends.append(self._clock())
            elif isinstance(ev, ToolCallError):
                metrics.PARSER_ERRORS.labels(self._model, "error").inc()
            elif isinstance(ev, ToolCallTruncated):
                metrics.PARSER_ERRORS.labels(self._model, "truncated").inc()

    def finished(self) -> None:
        end = self._clock()
        for t in self._tool_ends:
            metrics.TOOL_DISPATCH_LEAD.labels(self._model).observe(end - t)
        self._tool_ends.clear()
