"""Recorded traces: one JSON line per finished turn, replayed offline by `agentserve doctor TRACE`.

Two writers: `BackgroundTraceWriter` for the serving path (a bounded queue and one thread: encoding a
100K-token turn takes ~10 ms, which must not land on the event loop) and `TraceWriter`, which writes
on the caller's thread, for scripts and tests.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from agentserve.traces.background import AppendFile, BackgroundWriter


@dataclass(frozen=True)
class TraceTurn:
    session: str
    prompt_ids: Sequence[int]
    output_ids: Sequence[int]


def trace_line(turn: TraceTurn) -> str:
    return json.dumps(
        {"session": turn.session, "prompt_ids": list(turn.prompt_ids), "output_ids": list(turn.output_ids)}
    )


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


class TraceWriter:
    """Appends turns to a JSONL file on the caller's thread."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()

    def write(self, turn: TraceTurn) -> None:
        line = trace_line(turn)
        with self._lock, self._path.open("a") as f:
            f.write(line + "\n")


class BackgroundTraceWriter(BackgroundWriter[TraceTurn]):
    """Appends turns to a JSONL file from its own thread (traces/background.py); `write` only enqueues and never
    blocks. What it holds is bounded in tokens, since a held turn keeps its token lists alive: past the bound a
    turn is dropped and counted in `dropped`. The caller must not mutate a turn's token lists after handing them
    over."""

    def __init__(self, path: str | Path, *, max_pending_tokens: int = 4_000_000) -> None:
        super().__init__(
            AppendFile(path), trace_line, lambda t: len(t.prompt_ids) + len(t.output_ids),
            max_pending=max_pending_tokens, name="trace-writer",
        )
