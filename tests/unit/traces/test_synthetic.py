"""Synthetic agent traces have the published shapes, block chains a replay can trust, and survive a file."""

from __future__ import annotations

import statistics
from collections import defaultdict
from functools import lru_cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.traces.jsonl import read_records, write_records
from agentserve.traces.record import TraceRecord
from agentserve.traces.synthetic import TraceShape, generate


def _sessions(records: list[TraceRecord]) -> dict[str, list[TraceRecord]]:
    by: dict[str, list[TraceRecord]] = defaultdict(list)
    for r in records:
        by[r.session].append(r)
    for rs in by.values():
        rs.sort(key=lambda r: r.t)
    return by


@lru_cache(maxsize=1)
def _big() -> tuple[TraceRecord, ...]:
    return tuple(generate(TraceShape(sessions=150, seed=7)))


def test_published_shapes():
    recs = list(_big())
    by = _sessions(recs)
    top = [rs for s, rs in by.items() if rs[0].parent_session is None]
    assert len(top) == 150
    # 131 input tokens per output token [M], over the whole trace
    ratio = sum(r.prompt_tokens for r in recs) / sum(r.output_tokens for r in recs)
    assert 105 <= ratio <= 160, ratio
    # long sessions: median ~33 turns [M], 30-40 [I]; short ones exist too
    turns = [sum(r.kind != "compaction" for r in rs) for rs in top]
    long_ = [n for n in turns if n >= 20]
    assert 30 <= statistics.median(long_) <= 38
    assert sum(n <= 12 for n in turns) >= 0.15 * len(top)
    # 80-140K tokens of context by turn 30 (sessions that did not compact before it)
    at30 = [rs[29].prompt_tokens for rs in top if len(rs) >= 30 and not any(r.kind == "compaction" for r in rs[:30])]
    assert len(at30) >= 30
    q = statistics.quantiles(at30, n=10)
    assert 65_000 <= q[0] and q[-1] <= 160_000 and 80_000 <= statistics.median(at30) <= 140_000
    # subagents in about half the sessions [I]
    parents = {rs[0].parent_session for rs in by.values() if rs[0].parent_session}
    assert 0.35 <= len(parents) / len(top) <= 0.65
    # tool gaps of seconds: median of the tool-result gaps
    gaps = [r.gap_s for r in recs if r.kind == "tool_result" and r.gap_s is not None]
    assert 1.0 <= statistics.median(gaps) <= 10.0
    assert any(r.kind == "compaction" for r in recs)


def _check_chains(recs: list[TraceRecord], shape: TraceShape) -> None:
    by = _sessions(recs)
    system_blocks: dict[str, tuple[int, ...]] = {}
    for sid, rs in by.items():
        for r in rs:
            assert len(r.input_blocks) == r.prompt_tokens // r.block_size
            assert len(r.input_blocks) + len(r.output_blocks) == (r.prompt_tokens + r.output_tokens) // r.block_size
        for prev, cur in zip(rs, rs[1:]):
            written = prev.input_blocks + prev.output_blocks
            if prev.kind == "compaction":
                # reset: the summary starts a new context that shares the system prompt's blocks only
                shared = next((i for i, (a, b) in enumerate(zip(written, cur.input_blocks)) if a != b),
                              min(len(written), len(cur.input_blocks)))
                assert shared <= max(shape.system_tokens) // prev.block_size
                assert cur.input_blocks[:shared] == rs[0].input_blocks[:shared]
            else:
                assert cur.input_blocks[: len(written)] == written, (sid, prev.request_id)
                assert cur.prompt_tokens > prev.prompt_tokens + prev.output_tokens - prev.block_size
        parent = rs[0].parent_session
        if parent is not None:  # a subagent's first request shares its parent's system prefix
            p0 = by[parent][0].input_blocks
            n = next((i for i, (a, b) in enumerate(zip(p0, rs[0].input_blocks)) if a != b), 0)
            assert n >= min(shape.system_tokens) // rs[0].block_size
            spawn = [q for q in by[parent] if q.t + q.duration_s <= rs[0].t + 1e-9]
            assert spawn and "Task" in spawn[-1].tool_calls  # it began after a spawning request ended
        system_blocks[sid] = rs[0].input_blocks[: min(shape.system_tokens) // rs[0].block_size]
    # sessions of one harness share their first blocks; a trace with few harnesses has such pairs
    assert len(set(system_blocks.values())) <= shape.harnesses


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    sessions=st.integers(1, 6),
    block_size=st.sampled_from([16, 64, 128, 256]),
    subagent_share=st.floats(0.0, 1.0),
    compact_low=st.integers(20_000, 60_000),
)
def test_each_turn_extends_the_previous_input_and_output(seed, sessions, block_size, subagent_share, compact_low):
    shape = TraceShape(
        sessions=sessions, seed=seed, block_size=block_size, subagent_share=subagent_share,
        compact_at_tokens=(compact_low, compact_low + 10_000), system_tokens=(2_000, 6_000),
        context_at_30=(40_000, 60_000), long_turns=(8, 16, 12), short_turns=(2, 5), subagent_turns=(2, 5),
    )
    recs = generate(shape)
    _check_chains(recs, shape)
    assert {r.session for r in recs if r.parent_session is None} == {f"s{i:05d}" for i in range(sessions)}


def test_compaction_resets_to_the_system_prefix():
    shape = TraceShape(sessions=4, seed=3, compact_at_tokens=(40_000, 45_000))
    recs = generate(shape)
    compactions = [r for r in recs if r.kind == "compaction"]
    assert compactions and all(r.prompt_tokens > 40_000 for r in compactions)
    _check_chains(recs, shape)


def test_seeded():
    a, b = generate(TraceShape(sessions=3, seed=5)), generate(TraceShape(sessions=3, seed=5))
    assert a == b and a != generate(TraceShape(sessions=3, seed=6))


def test_round_trip(tmp_path):
    recs = generate(TraceShape(sessions=3, seed=1))
    for name in ("t.jsonl", "t.jsonl.gz"):
        path = tmp_path / name
        assert write_records(path, recs) == len(recs)
        assert path.stat().st_mode & 0o777 == 0o600
        assert read_records(path) == recs


def test_cli_generate(tmp_path, capsys):
    from agentserve.cli import main

    out = tmp_path / "t.jsonl"
    assert main(["trace", "generate", "-o", str(out), "--sessions", "2", "--seed", "4",
                 "--set", "short_turns=2,3", "--set", "subagent_share=0"]) == 0
    recs = read_records(out)
    assert recs == generate(TraceShape(sessions=2, seed=4, short_turns=(2, 3), subagent_share=0.0))
    assert main(["trace", "generate", "-o", str(out), "--set", "nope=1"]) == 2


def test_describe_reports_the_published_terms():
    from agentserve.traces.shape import describe

    d = describe(_big())
    assert d["sessions"] == 150 and 105 <= d["input_per_output_token"] <= 160
    assert 80_000 <= d["context_at_turn_30_p10_p50_p90"][1] <= 140_000
    assert 0.35 <= d["sessions_with_subagents"] <= 0.65 and d["sessions_compacting"] >= 1
    assert 0.85 <= d["shared_cache_hit_rate"] <= 0.99
