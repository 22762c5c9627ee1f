"""Recorded traces: one JSON line per finished turn, replayed offline by `agentserve doctor TRACE`."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from agentserve.doctor.tracker import PrefixReport, SessionTracker


@dataclass(frozen=True)
class TraceTurn:
    session: str
    prompt_ids: list[int]
    output_ids: list[int]


class TraceWriter:
    """Appends turns to a JSONL file; cheap enough to leave on while investigating a session."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()

    def write(self, turn: TraceTurn) -> None:
        line = json.dumps(
            {"session": turn.session, "prompt_ids": turn.prompt_ids, "output_ids": turn.output_ids}
        )
        with self._lock, self._path.open("a") as f:
            f.write(line + "\n")


def read_trace(path: str | Path) -> Iterator[TraceTurn]:
    with Path(path).open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                yield TraceTurn(str(raw["session"]), list(raw["prompt_ids"]), list(raw["output_ids"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not a trace line ({exc})") from exc


def replay(
    turns: Sequence[TraceTurn] | Iterator[TraceTurn],
    decode: Callable[[Sequence[int]], str],
    special_ids: frozenset[int] = frozenset(),
) -> Iterator[tuple[TraceTurn, PrefixReport | None]]:
    tracker = SessionTracker(decode, special_ids)
    for turn in turns:
        yield turn, tracker.check(turn.session, turn.prompt_ids)
        tracker.record(turn.session, turn.prompt_ids, turn.output_ids)
