"""The ingress's face of the prefix doctor (agentserve.doctor.PrefixDoctor): checks never stall the event loop
(a divergence is diagnosed on a worker thread), records copy and return, trace lines go to a writer thread.

Session keys arrive already scoped to the caller (`<identity>/<session>`), so one caller's header never
tells how much of another caller's turn matches.
"""

from __future__ import annotations

from typing import Any, Sequence

from agentserve import metrics
from agentserve.config import ServeArgs
from agentserve.doctor import PrefixDoctor, PrefixReport


class PrefixDoctorClient:
    def __init__(self, args: ServeArgs, tokenizer: Any) -> None:
        self._doctor = PrefixDoctor.from_args(args, tokenizer)

    async def check(self, session: str, prompt_ids: Sequence[int]) -> PrefixReport | None:
        return await self._doctor.check(session, prompt_ids)

    def observe(self, model: str, report: PrefixReport | None) -> None:
        if report is None:
            return
        metrics.PREFIX_REUSE.labels(model).observe(report.reuse_ratio)
        if report.cause is not None:
            metrics.PREFIX_DIVERGENCES.labels(model, report.cause).inc()

    def record(self, session: str, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> None:
        self._doctor.record(session, prompt_ids, output_ids)

    def close(self) -> None:
        self._doctor.close()
