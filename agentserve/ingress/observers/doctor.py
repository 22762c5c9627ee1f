"""The prefix doctor's memory of each session's last turn, fed from finished turns."""

from __future__ import annotations

from agentserve.doctor import PrefixDoctor
from agentserve.ingress.observers import TurnEnded


class DoctorRecorder:
    """After a finished turn, remember its prompt and output: the next turn's prompt is checked against them
    (after a compaction, against nothing)."""

    def __init__(self, doctor: PrefixDoctor) -> None:
        self._doctor = doctor

    def turn_ended(self, ended: TurnEnded) -> None:
        if ended.request.hints.kind == "compaction" and ended.session:
            # The harness replaces the history with this turn's summary: the next turn extends neither.
            self._doctor.forget(ended.session)
            return
        if not ended.finished or ended.warm_only or not ended.session or ended.prepared is None:
            return
        assert ended.state is not None  # finished says so
        self._doctor.record(ended.session, ended.prepared.engine.token_ids, ended.state.output_ids)
