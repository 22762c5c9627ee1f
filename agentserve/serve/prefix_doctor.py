"""The ingress's face of the prefix doctor: checks run off the event loop, records never block a stream.

Session keys arrive already scoped to the caller (`<identity>/<session>`), so one caller's header never
tells how much of another caller's turn matches.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Sequence

from agentserve import metrics
from agentserve.config import ServeArgs
from agentserve.doctor import PrefixReport, SessionTracker
from agentserve.doctor.trace import TraceTurn, TraceWriter


class PrefixDoctorClient:
    def __init__(self, args: ServeArgs, tokenizer: Any) -> None:
        self._tracker = SessionTracker(tokenizer.decode, frozenset(tokenizer.all_special_ids))
        self._lock = threading.Lock()
        self._trace = TraceWriter(args.trace_path) if args.trace_path else None

    async def check(self, session: str, prompt_ids: Sequence[int]) -> PrefixReport | None:
        return await asyncio.to_thread(self._check, session, prompt_ids)

    def _check(self, session: str, prompt_ids: Sequence[int]) -> PrefixReport | None:
        with self._lock:
            return self._tracker.check(session, prompt_ids)

    def observe(self, model: str, report: PrefixReport | None) -> None:
        if report is None:
            return
        metrics.PREFIX_REUSE.labels(model).observe(report.reuse_ratio)
        if report.cause is not None:
            metrics.PREFIX_DIVERGENCES.labels(model, report.cause).inc()

    def record(self, session: str, prompt_ids: list[int], output_ids: list[int]) -> None:
        with self._lock:
            self._tracker.record(session, prompt_ids, output_ids)
        if self._trace is not None:
            self._trace.write(TraceTurn(session, prompt_ids, output_ids))
