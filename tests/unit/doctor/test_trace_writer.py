"""The serving path's trace writer: every line lands when the disk keeps up, none blocks when it does not."""

from __future__ import annotations

import os
import threading
import time

from agentserve.doctor.trace import BackgroundTraceWriter, TraceTurn, read_trace


def test_writes_every_turn_in_order(tmp_path):
    path = tmp_path / "trace.jsonl"
    writer = BackgroundTraceWriter(path)
    turns = [TraceTurn(f"s{i % 7}", list(range(i, i + 50)), [i]) for i in range(500)]
    for t in turns:
        assert writer.write(t)
    assert writer.flush(timeout=10)
    writer.close()
    assert list(read_trace(path)) == turns
    assert (writer.written, writer.dropped) == (500, 0)


def test_a_stalled_disk_costs_trace_lines_not_latency(tmp_path):
    """A FIFO nobody reads blocks the writer thread in open(): writes must still return at once, and
    past the queue's bound they are dropped and counted."""
    path = tmp_path / "stalled"
    os.mkfifo(path)
    writer = BackgroundTraceWriter(path, max_pending_tokens=10_000)
    turn = TraceTurn("s", list(range(999)), [1])  # 1,000 tokens
    started = time.perf_counter()
    accepted = sum(writer.write(turn) for _ in range(200))
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5  # 200 writes of 1K-token turns, none waits for the disk
    assert accepted == 10  # the bound counts what is queued and what the thread holds
    assert writer.dropped == 200 - accepted

    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(open(path).read().splitlines()))
    reader.start()  # the disk comes back
    assert writer.flush(timeout=10)
    writer.close()
    reader.join(timeout=10)
    assert len(lines) == writer.written == accepted
