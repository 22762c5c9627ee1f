"""The serving path's doctor: same reports as the offline tracker, and the event loop keeps running."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest
from hypothesis import given, settings, strategies as st

from agentserve.config import DoctorSpec, ServeArgs
from agentserve.doctor import PrefixDoctor, SessionTracker
from agentserve.doctor.decode import releasing_decode
from agentserve.doctor.trace import read_trace

LINE = 'def handler_{i}(request):\n    return {{"name": "read_file", "path": "src/module_{i}.py"}}\n'


@pytest.fixture(scope="module")
def history(tokenizer) -> list[int]:
    """100K tokens of code-like agent history."""
    ids = tokenizer.encode("".join(LINE.format(i=i) for i in range(5000)), add_special_tokens=False)
    while len(ids) < 100_000:
        ids = ids + ids
    return ids[:100_000]


@dataclass(frozen=True)
class LoopLag:
    """How late a 1 ms ticker woke while some work ran beside it on the same loop."""

    lags: list[float]  # seconds, sorted
    wall: float  # how long the work took

    @property
    def p90(self) -> float:
        return self.lags[len(self.lags) * 9 // 10]

    @property
    def blocked_share(self) -> float:
        """Share of the work's wall time the loop spent unable to run a ready task (lags over 2 ms)."""
        return sum(x for x in self.lags if x > 0.002) / self.wall


async def loop_lag(work) -> tuple[LoopLag, object]:
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t - 0.001)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    lags.clear()
    started = time.perf_counter()
    result = await work()
    wall = time.perf_counter() - started
    done.set()
    await task
    return LoopLag(sorted(lags), wall), result


def test_divergence_at_100k_tokens_does_not_stall_the_loop(tokenizer, history):
    special = frozenset(tokenizer.all_special_ids)
    prompt, output = history[:99_000], history[99_000:]
    edited = list(history)
    edited[50_000] = tokenizer.encode("zzz", add_special_tokens=False)[0]  # a proxy rewrote the history

    tracker = SessionTracker(tokenizer.decode, special)
    tracker.record("s", prompt, output)
    expected = tracker.check("s", edited)
    assert expected.cause == "history_changed" and expected.reused_tokens == 50_000

    def stall() -> float:
        """What the ingress did before: one diagnosis on the loop, which stalls every stream that long."""
        started = time.perf_counter()
        tracker.check("s", edited)
        return time.perf_counter() - started

    async def served():
        doctor = PrefixDoctor(releasing_decode(tokenizer), special)
        try:
            for k in range(8):  # many sessions diverging at once
                doctor.record(f"key/{k}", prompt, output)
            return await loop_lag(lambda: asyncio.gather(*(doctor.check(f"key/{k}", edited) for k in range(8))))
        finally:
            doctor.close()

    # Eight diagnoses' worth of work go by and the loop keeps ticking: nine ticks in ten are late by less
    # than a quarter of what one diagnosis on the loop stalls it. Each run is compared with a stall measured
    # right before it (a busy machine slows both alike); best of three runs.
    runs = []
    for _ in range(3):
        before = stall()
        lag, reports = asyncio.run(served())
        assert reports == [expected] * 8
        runs.append((lag, before))
        if lag.p90 < before / 4:
            break
    print("; ".join(f"p90 {lag.p90 * 1e3:.1f} ms (max {lag.lags[-1] * 1e3:.1f}, blocked {lag.blocked_share:.2f}) "
                    f"vs {before * 1e3:.0f} ms stall" for lag, before in runs))
    assert any(lag.p90 < before / 4 for lag, before in runs)


def test_faithful_turn_is_answered_on_the_loop(tokenizer, history):
    doctor = PrefixDoctor(releasing_decode(tokenizer), frozenset(tokenizer.all_special_ids))

    async def go():
        doctor.record("s", history[:90_000], history[90_000:])
        return await doctor.check("s", history + [1, 2, 3])

    report = asyncio.run(go())
    doctor.close()
    assert report is not None and report.cause is None and report.reuse_ratio == 1.0
    assert report.header() == "reuse=1.0000; reused=100000; expected=100000"


def test_first_turn_empty_key_and_disabled_give_no_report(tokenizer):
    async def reports(doctor: PrefixDoctor):
        doctor.record("", [1, 2], [3])
        doctor.record("s", [1, 2], [3])
        try:
            return [await doctor.check(key, [1, 2, 3]) for key in ("new", "", "s")]
        finally:
            doctor.close()

    first, empty, known = asyncio.run(reports(PrefixDoctor(releasing_decode(tokenizer))))
    assert first is None and empty is None and known.reuse_ratio == 1.0
    assert asyncio.run(reports(PrefixDoctor(tokenizer.decode, enabled=False))) == [None, None, None]


def test_from_args_bounds_memory_and_writes_the_trace(tmp_path, tokenizer):
    path = tmp_path / "trace.jsonl"
    args = ServeArgs(trace_path=str(path), doctor=DoctorSpec(max_bytes=10_000))
    doctor = PrefixDoctor.from_args(args, tokenizer)

    async def go():
        for s in range(50):
            doctor.record(f"key/{s}", list(range(1000)), [7])
        return await doctor.check("key/49", list(range(1000)) + [7, 8])

    report = asyncio.run(go())
    stats = doctor.stats()
    doctor.close()
    assert report is not None and report.reuse_ratio == 1.0
    assert stats.bytes <= 10_000 and stats.sessions == 2
    assert [t.session for t in read_trace(path)] == [f"key/{s}" for s in range(50)]


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 49_151), max_size=200))
def test_releasing_decode_gives_the_tokenizers_text(tokenizer, ids):
    assert releasing_decode(tokenizer)(ids) == tokenizer.decode(ids)
