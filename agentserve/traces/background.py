"""A bounded background line writer: the serving path hands it items and never waits for the disk.

Encoding an item (a 100K-token doctor turn's JSON, a request record's block hashes) takes milliseconds that must
not land on the event loop, and a slow or stalled disk must cost trace lines, never stream latency. One thread
takes whatever is queued, encodes it and hands the text to a sink (an append-only file, a rotating file).
Used by the prefix doctor's token trace (doctor/trace.py) and the request traces (traces/writer.py).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from pathlib import Path
from typing import Callable, Generic, Protocol, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Sink(Protocol):
    def write(self, text: str) -> None: ...


class AppendFile:
    """Appends to one file, opened per batch (a file moved or deleted by an operator is simply made again)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def write(self, text: str) -> None:
        with self.path.open("a") as f:
            f.write(text)

    def __repr__(self) -> str:
        return str(self.path)


class BackgroundWriter(Generic[T]):
    """Encodes items to lines and writes them from its own thread; `write` only enqueues and never blocks.

    What it holds (queued or being written) is bounded by `size(item)` summed (tokens, bytes: the caller's
    unit): past `max_pending` an item is dropped and counted in `dropped` (a single item larger than the bound is
    taken when nothing else is held). `on_result(written, dropped)` is told each batch's and each refusal's
    counts (a metric). The caller must not mutate an item after handing it over.
    """

    def __init__(
        self,
        sink: Sink,
        encode: Callable[[T], str],
        size: Callable[[T], int],
        *,
        max_pending: int,
        name: str = "trace-writer",
        on_result: Callable[[int, int], None] | None = None,
    ) -> None:
        self._sink = sink
        self._encode = encode
        self._size = size
        self._max_pending = max_pending
        self._on_result = on_result
        self._pending: deque[tuple[T, int]] = deque()
        self._held = 0  # queued or being written, in size units
        self._in_flight = 0  # items taken off the queue and not yet on disk
        self._cond = threading.Condition()
        self._closed = False
        self.written = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def write(self, item: T) -> bool:
        """Queue an item; False (and counted) when the queue is full or the writer closed."""
        size = self._size(item)
        with self._cond:
            if self._closed or (self._held and self._held + size > self._max_pending):
                self.dropped += 1
                refused = True
            else:
                self._pending.append((item, size))
                self._held += size
                self._cond.notify()
                refused = False
        if refused and self._on_result is not None:
            self._on_result(0, 1)
        return not refused

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued item is on disk; False on timeout."""
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
            lines: list[str] = []
            for item, _ in batch:
                try:
                    lines.append(self._encode(item) + "\n")
                except Exception as exc:  # noqa: BLE001 - one bad item costs its line only
                    logger.warning("%r: an item not encoded: %r", self._sink, exc)
            try:
                if lines:
                    self._sink.write("".join(lines))
                written = len(lines)
            except (OSError, TypeError, ValueError) as exc:
                logger.warning("%r: %d lines not written: %r", self._sink, len(lines), exc)
                written = 0
            with self._cond:
                self.written += written
                self.dropped += len(batch) - written
                self._in_flight = 0
                self._held -= sum(size for _, size in batch)
                self._cond.notify_all()
            if self._on_result is not None:
                self._on_result(written, len(batch) - written)
