"""Trace files: JSON lines of TraceRecord, plain or gzipped (by the `.gz` suffix), written 0600."""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO, Iterable, Iterator

from agentserve.traces.record import TraceRecord


def _open(path: Path, mode: str) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")  # type: ignore[return-value]
    return path.open(mode, encoding="utf-8")


def iter_records(path: Path | str) -> Iterator[TraceRecord]:
    """The records of a trace file, in file order; blank lines skipped."""
    with _open(Path(path), "r") as f:
        for line in f:
            if line.strip():
                yield TraceRecord.model_validate_json(line)


def read_records(path: Path | str) -> list[TraceRecord]:
    return list(iter_records(path))


def write_records(path: Path | str, records: Iterable[TraceRecord]) -> int:
    """Write (replacing) a trace file readable by its owner only; returns the number of records."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
    n = 0
    with _open(path, "w") as f:
        for r in records:
            f.write(r.model_dump_json() + "\n")
            n += 1
    return n
