"""Recorded traces: one JSON line per finished turn, replayed offline by `agentserve doctor TRACE`.

Two writers: `BackgroundTraceWriter` for the serving path (a bounded queue and one thread: encoding a
100K-token turn takes ~10 ms, which must not land on the event loop) and `TraceWriter`, which writes
on the caller's thread, for scripts and tests.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

logger = logging.getLogger(__name__)


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


class BackgroundTraceWriter:
    """Appends turns to a JSONL file from its own thread; `write` only enqueues and never blocks.

    What it holds (queued or being written) is bounded in tokens, since a held turn keeps its token lists
    alive: past the bound a turn is dropped and counted in `dropped` (a single turn larger than the bound
    is taken when nothing else is held), so an overloaded disk costs trace lines, never stream latency.
    The caller must not mutate a turn's token lists after handing them over.
    """

    def __init__(self, path: str | Path, *, max_pending_tokens: int = 4_000_000) -> None:
        self._path = Path(path)
        self._max_pending = max_pending_tokens
        self._pending: deque[TraceTurn] = deque()
        self._held_tokens = 0  # queued or being written
        self._in_flight = 0  # turns taken off the queue and not yet on disk
        self._cond = threading.Condition()
        self._closed = False
        self.written = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
        self._thread.start()

    def write(self, turn: TraceTurn) -> bool:
        """Queue a turn; False (and counted) when the queue is full or the writer closed."""
        size = len(turn.prompt_ids) + len(turn.output_ids)
        with self._cond:
            if self._closed or (self._held_tokens and self._held_tokens + size > self._max_pending):
                self.dropped += 1
                return False
            self._pending.append(turn)
            self._held_tokens += size
            self._cond.notify()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued turn is on disk; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._in_flight, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (up to `timeout`), then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if not self._pending:
                    return
                batch = list(self._pending)
                self._pending.clear()
                self._in_flight = len(batch)
            try:
                text = "".join(trace_line(t) + "\n" for t in batch)
                with self._path.open("a") as f:
                    f.write(text)
                written = len(batch)
            except (OSError, TypeError, ValueError) as exc:
                logger.warning("trace %s: %d turns not written: %r", self._path, len(batch), exc)
                written = 0
            with self._cond:
                self.written += written
                self.dropped += len(batch) - written
                self._in_flight = 0
                self._held_tokens -= sum(len(t.prompt_ids) + len(t.output_ids) for t in batch)
                self._cond.notify_all()
