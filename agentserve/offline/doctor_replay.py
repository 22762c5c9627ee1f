"""Replaying a recorded trace through the doctor, turn by turn (`agentserve doctor TRACE`)."""

from __future__ import annotations

from typing import Iterable, Iterator

from agentserve.doctor.report import Decode, PrefixReport
from agentserve.doctor.trace import TraceTurn
from agentserve.doctor.tracker import SessionTracker


def replay(
    turns: Iterable[TraceTurn], decode: Decode, special_ids: frozenset[int] = frozenset()
) -> Iterator[tuple[TraceTurn, PrefixReport | None]]:
    """Each turn with its report against the same session's previous turn (None for a first turn)."""
    tracker = SessionTracker(decode, special_ids)
    for turn in turns:
        yield turn, tracker.check(turn.session, turn.prompt_ids)
        tracker.record(turn.session, turn.prompt_ids, turn.output_ids)
