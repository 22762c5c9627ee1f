"""The request trace writer: records queued on the event loop, hashed, encoded and written on its own thread.

A record's block hashes cover the whole prompt and output (100K+ tokens at an agent's turn 30): the hashing and
the JSON encoding run on the background writer's thread (traces/background.py), into a bounded, rotated 0600
file (traces/files.py). A full queue drops the record and counts it, never waits.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path

from agentserve import metrics
from agentserve.traces.background import BackgroundWriter
from agentserve.traces.blocks import BlockHasher
from agentserve.traces.files import RotatingFile
from agentserve.traces.record import TraceRecord

RECORD_OVERHEAD_BYTES = 1024  # a record's fields besides its token ids, held while queued


@dataclass(frozen=True, slots=True)
class PendingRecord:
    """A record without its block hashes, and what they are computed from (shared, read-only token arrays)."""

    record: TraceRecord
    prompt: array
    output: array
    cache_salt: str | None = None

    @property
    def nbytes(self) -> int:
        return (len(self.prompt) + len(self.output)) * self.prompt.itemsize + RECORD_OVERHEAD_BYTES


def _counted(written: int, dropped: int) -> None:
    if written:
        metrics.REQUEST_TRACES.labels("written").inc(written)
    if dropped:
        metrics.REQUEST_TRACES.labels("dropped").inc(dropped)


class RequestTraceWriter:
    """One Ingress replica's trace file: `write` never blocks; `close` writes what is queued, then stops."""

    def __init__(
        self, path: str | Path, *, salt: bytes, max_bytes_per_file: int, keep_files: int, max_pending_bytes: int
    ) -> None:
        self._hasher = BlockHasher(salt)
        self._file = RotatingFile(path, max_bytes=max_bytes_per_file, keep=keep_files)
        self._writer: BackgroundWriter[PendingRecord] = BackgroundWriter(
            self._file, self.encode, lambda p: p.nbytes, max_pending=max_pending_bytes, name="request-traces",
            on_result=_counted,
        )

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def written(self) -> int:
        return self._writer.written

    @property
    def dropped(self) -> int:
        return self._writer.dropped

    def encode(self, pending: PendingRecord) -> str:
        """The record's JSON line, its block hashes filled in (on the writer's thread)."""
        r = pending.record
        inputs, outputs = self._hasher.request_blocks(
            pending.prompt, pending.output, r.block_size, model=r.model, adapter=r.adapter,
            cache_salt=pending.cache_salt,
        )
        return r.model_copy(update={"input_blocks": inputs, "output_blocks": outputs}).model_dump_json()

    def write(self, pending: PendingRecord) -> bool:
        return self._writer.write(pending)

    def flush(self, timeout: float | None = None) -> bool:
        return self._writer.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        self._writer.close(timeout)
        self._file.close()
