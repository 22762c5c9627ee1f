"""Request trace files (traces/files.py, traces/writer.py): bounded on disk, owner-only, never waited for."""

from __future__ import annotations

import os
import stat
import threading
import time
from array import array

from agentserve import metrics
from agentserve.traces.blocks import trace_salt
from agentserve.traces.files import RotatingFile
from agentserve.traces.jsonl import read_records
from agentserve.traces.record import TraceRecord
from agentserve.traces.writer import PendingRecord, RequestTraceWriter


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_rotation_keeps_the_newest_lines_within_the_bounds(tmp_path):
    path = tmp_path / "t" / "requests.jsonl"
    f = RotatingFile(path, max_bytes=1000, keep=2)
    lines = [f"line {i:04d} " + "x" * 80 + "\n" for i in range(200)]  # ~18 KB through a 3 x 1 KB budget
    for line in lines:
        f.write(line)
    f.close()
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["requests.jsonl", "requests.jsonl.1", "requests.jsonl.2"]
    assert all(os.path.getsize(path.parent / n) <= 1000 for n in files)
    kept = "".join((path.parent / n).read_text() for n in reversed(files)).splitlines(keepends=True)
    assert kept == lines[-len(kept):]  # oldest first, contiguous, ending with the last line written
    assert len(kept) >= 2 * (1000 // len(lines[0]))


def test_files_are_owner_only_whatever_the_umask_or_an_existing_file(tmp_path):
    path = tmp_path / "new" / "requests.jsonl"
    old = os.umask(0)
    try:
        f = RotatingFile(path, max_bytes=200, keep=1)
        for _ in range(10):
            f.write("y" * 60 + "\n")
        f.close()
    finally:
        os.umask(old)
    assert _mode(path.parent) == 0o700
    assert _mode(path) == 0o600 and _mode(path.with_name("requests.jsonl.1")) == 0o600
    loose = tmp_path / "loose.jsonl"
    loose.write_text("earlier\n")
    os.chmod(loose, 0o644)
    f = RotatingFile(loose, max_bytes=10_000, keep=1)
    f.write("more\n")
    f.close()
    assert _mode(loose) == 0o600 and loose.read_text() == "earlier\nmore\n"


def test_keep_zero_holds_one_file(tmp_path):
    path = tmp_path / "r.jsonl"
    f = RotatingFile(path, max_bytes=100, keep=0)
    for i in range(50):
        f.write(f"{i:03d}" + "z" * 20 + "\n")
    f.close()
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"] and os.path.getsize(path) <= 100


def _pending(i: int, tokens: int = 64) -> PendingRecord:
    record = TraceRecord(request_id=f"r{i}", t=1.0 + i, model="m", prompt_tokens=tokens, duration_s=0.1,
                         block_size=16)
    return PendingRecord(record, array("I", range(tokens)), array("I", [1, 2, 3]))


def test_the_writer_fills_in_block_hashes_off_the_caller(tmp_path):
    w = RequestTraceWriter(tmp_path / "r.jsonl", salt=trace_salt("k" * 32), max_bytes_per_file=1 << 20,
                           keep_files=1, max_pending_bytes=1 << 20)
    for i in range(20):
        assert w.write(_pending(i))
    assert w.flush(timeout=10)
    w.close()
    records = read_records(tmp_path / "r.jsonl")
    assert [r.request_id for r in records] == [f"r{i}" for i in range(20)]
    assert all(len(r.input_blocks) == 4 and r.output_blocks == () for r in records)  # 67 tokens: 4 full blocks
    assert _mode(tmp_path / "r.jsonl") == 0o600


def test_a_stalled_disk_drops_records_and_counts_them_never_blocks(tmp_path):
    fifo = tmp_path / "stalled"
    os.mkfifo(fifo)
    dropped = metrics.REQUEST_TRACES.labels("dropped")
    before = dropped._value.get()
    one = _pending(0, tokens=1000).nbytes
    w = RequestTraceWriter(fifo, salt=b"s", max_bytes_per_file=1 << 30, keep_files=0, max_pending_bytes=10 * one)
    started = time.perf_counter()
    accepted = sum(w.write(_pending(i, tokens=1000)) for i in range(100))
    assert time.perf_counter() - started < 0.5
    assert accepted == 10 and w.dropped == 90
    assert dropped._value.get() - before == 90
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(open(fifo).read().splitlines()))
    reader.start()
    assert w.flush(timeout=10)
    w.close()
    reader.join(timeout=10)
    assert len(lines) == w.written == 10
