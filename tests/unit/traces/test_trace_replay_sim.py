"""A trace replayed on the router simulator keeps its sessions' gaps and subagent dependencies in simulated time,
and the replay benchmark reports every figure for every policy."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.bench import trace_replay
from agentserve.offline import router_sim as sim
from agentserve.offline import trace_workload as tw
from agentserve.offline.session_flow import NO_RETRY, RetryPolicy, SessionFlow
from agentserve.traces.jsonl import write_records
from agentserve.traces.record import TraceRecord
from agentserve.traces.synthetic import TraceShape, generate

BS = 16
SLOW = sim.ReplicaModel(kv_blocks=4096, prefill_ms_per_token=2.0, itl_ms=50.0)  # nothing like the recorded times


def _rec(rid: str, session: str, t: float, dur: float, prompt: int, out: int, start: int, *, parent=None,
         gap=None, kind="tool_result", calls=()) -> TraceRecord:
    blocks = tuple(range(start, start + (prompt + out) // BS))
    return TraceRecord(
        request_id=rid, t=t, session=session, parent_session=parent, kind=kind, model="m", prompt_tokens=prompt,
        output_tokens=out, duration_s=dur, block_size=BS, input_blocks=blocks[: prompt // BS],
        output_blocks=blocks[prompt // BS :], gap_s=gap, tool_calls=calls,
    )


def _trace() -> list[TraceRecord]:
    """P0 spawns C1 and C2 (0.5 s after its end); P1 waits for both (2 s after the last); C3, spawned by P1, runs
    in the background (it ends after P2 arrives), so P2 comes its 4 s gap after P1."""
    return [
        _rec("p0", "P", 0.0, 10.0, 320, 32, 1000, kind="user_message", calls=("Task", "Task")),
        _rec("c1a", "C1", 10.5, 5.0, 160, 16, 2000, parent="P", kind="subagent_spawn"),
        _rec("c1b", "C1", 16.5, 5.0, 200, 16, 2000, parent="P", gap=1.0),
        _rec("c2a", "C2", 10.5, 20.0, 160, 16, 3000, parent="P", kind="subagent_spawn"),
        _rec("p1", "P", 32.5, 10.0, 400, 32, 1000, gap=22.5, calls=("Task",)),
        _rec("c3a", "C3", 42.5, 60.0, 160, 16, 4000, parent="P", kind="subagent_spawn"),
        _rec("p2", "P", 46.5, 10.0, 480, 32, 1000, gap=4.0),
    ]


def _by_turn(flow: SessionFlow) -> dict[tuple[int, int], object]:
    return {(r.session, r.turn): r for r in flow.requests}


def test_structure_inferred_from_the_recorded_timeline():
    sessions = {s.sid: s for s in tw.sessions_from_trace(_trace())}
    p, c1, c2, c3 = (sessions[i] for i in range(4))  # by first arrival: P, C1, C2, C3
    assert p.parent is None and c1.parent == c2.parent == c3.parent == p.sid and p.key is None
    assert p.spawns == {0: [c1.sid, c2.sid], 1: [c3.sid]}
    assert p.joins == {1: ([c1.sid, c2.sid], pytest.approx(2.0))}  # C3 is not awaited: it ended after P2 came
    assert c1.start_s == pytest.approx(0.5) and c1.turns[0].gap_s == 1.0 and p.turns[1].gap_s == 4.0
    assert p.turns[0].blocks == list(range(1000, 1020)) and p.turns[0].written == list(range(1000, 1022))


@pytest.mark.parametrize("make", [sim.RoundRobin, lambda: sim.Ours(BS, "kv")])
def test_gaps_and_dependencies_hold_in_simulated_time(make):
    sessions = tw.sessions_from_trace(_trace())
    flow = SessionFlow(sessions, BS)
    res = sim.simulate(make(), 2, sessions, sim.Workload(block_size=BS), SLOW, flow=flow)
    assert res.rejected == 0 and res.served == 7
    r = _by_turn(flow)
    p0, p1, p2 = r[(0, 0)], r[(0, 1)], r[(0, 2)]
    c1a, c1b, c2a, c3a = r[(1, 0)], r[(1, 1)], r[(2, 0)], r[(3, 0)]
    assert p0.end != pytest.approx(10.0)  # not the recorded duration: the replay's times are its own
    assert c1a.arrival == pytest.approx(p0.end + 0.5) and c2a.arrival == pytest.approx(p0.end + 0.5)
    assert c1b.arrival == pytest.approx(c1a.end + 1.0)
    assert p1.arrival == pytest.approx(max(c1b.end, c2a.end) + 2.0)
    assert c3a.arrival == pytest.approx(p1.end)
    assert p2.arrival == pytest.approx(p1.end + 4.0)  # C3 is not awaited
    (program,) = flow.programs()
    assert program.complete and program.start == 0.0 and program.end == max(p2.end, c3a.end)
    assert p2.reusable_tokens == 432  # P1's prompt and output blocks: 27 of 16 tokens


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), replicas=st.integers(1, 3), load=st.floats(0.3, 2.0),
       policy=st.sampled_from(["round-robin", "kv", "session-affinity"]))
def test_no_subagent_starts_before_its_spawning_request_ends(seed, replicas, load, policy):
    shape = TraceShape(sessions=4, seed=seed, subagent_share=0.8, system_tokens=(1_000, 3_000),
                       context_at_30=(20_000, 40_000), long_turns=(6, 12, 8), short_turns=(2, 4),
                       subagent_turns=(2, 4), compact_at_tokens=(15_000, 20_000), block_size=64)
    sessions = tw.sessions_from_trace(generate(shape), 128)
    m = sim.ReplicaModel(kv_blocks=256, shed_after_s=1e9)
    sessions = tw.rescale(sessions, tw.load_factor(sessions, m, 128, replicas, load))
    flow = SessionFlow(sessions, 128)
    sim.simulate(trace_replay.make_policy(policy, 128)(), replicas, sessions, sim.Workload(block_size=128), m, flow)
    r = _by_turn(flow)
    assert len(r) == sum(len(s.turns) for s in sessions)  # every request of every session, once
    by_sid = {s.sid: s for s in sessions}
    for s in sessions:
        for k in range(1, len(s.turns)):
            joined = s.joins.get(k)
            after = max([r[(s.sid, k - 1)].end] + [r[(c, len(by_sid[c].turns) - 1)].end for c in joined[0]]
                        if joined else [r[(s.sid, k - 1)].end])
            wait = joined[1] if joined else s.turns[k - 1].gap_s
            assert r[(s.sid, k)].arrival == pytest.approx(after + wait)
        for k, children in s.spawns.items():
            for c in children:
                assert r[(c, 0)].arrival >= r[(s.sid, k)].end - 1e-9


def test_coarsened_replay_keeps_sizes_and_chains():
    recs = generate(TraceShape(sessions=2, seed=2, block_size=64))
    fine, coarse = tw.sessions_from_trace(recs), tw.sessions_from_trace(recs, 256)
    for a, b in zip(fine, coarse):
        for ta, tb in zip(a.turns, b.turns):
            assert ta.prompt_tokens == tb.prompt_tokens and tb.blocks == ta.blocks[3::4]
            assert len(tb.blocks) == ta.prompt_tokens // 256
    with pytest.raises(ValueError):
        tw.sessions_from_trace(recs, 96)


def test_load_rescales_top_level_arrivals_only():
    sessions = tw.sessions_from_trace(_trace() + [_rec("q0", "Q", 100.0, 1.0, 64, 16, 9000, kind="user_message")])
    m = sim.ReplicaModel()
    f1 = tw.load_factor(sessions, m, BS, 2, 0.5)
    assert tw.load_factor(sessions, m, BS, 4, 1.0) == pytest.approx(4 * f1)
    fast = tw.rescale(sessions, 4.0)
    assert [s.start_s for s in fast] == [0.0, 0.5, 0.5, 0.0, 25.0]
    assert tw.session_rate(fast) == pytest.approx(4 * tw.session_rate(sessions))


def test_bench_replay_sim_writes_every_figure(tmp_path, capsys):
    trace = tmp_path / "t.jsonl.gz"
    write_records(trace, generate(TraceShape(sessions=6, seed=1, long_turns=(6, 10, 8), short_turns=(2, 4),
                                             subagent_turns=(2, 3), context_at_30=(20_000, 30_000))))
    out = tmp_path / "r.json"
    assert trace_replay.main([str(trace), "--sim", "--replicas", "2", "--load", "0.5,1.5",
                              "--policies", "round-robin,kv", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0 and "| 2 | 150% | kv |" in out.with_suffix(".md").read_text()
    assert [(r["load"], r["policy"]) for r in doc["rows"]] == [(0.5, "round-robin"), (0.5, "kv"), (1.5, "round-robin"), (1.5, "kv")]
    for row in doc["rows"]:
        assert {"p50", "p90"} <= set(row["ttft_s"]) and row["served"] + row["shed"] == row["requests"]
        assert set(row["completion_s"]) == {"short (<=12)", "medium (13-29)", "long (>=30)"}
        assert row["output_tokens_per_s"] > 0 and 0 < row["cached_share"] <= row["reusable_share"] + 1e-9
        assert row["reprefilled_tokens"] >= 0 and 0 <= row["shed_rate"] <= 1
    assert doc["meta"]["trace"]["programs"] == 6 and doc["meta"]["replay_block_size"] == 256
    with pytest.raises(ValueError):
        trace_replay.make_policy("kv+no_such_switch", 256)
    with pytest.raises(ValueError):
        trace_replay.make_policy("kv+aging_tokens_per_s", 256)  # a number needs its value
    router = trace_replay.make_policy("kv+wait_for_cache+aging_tokens_per_s=500", 256)()
    assert router.name == "kv+wait_for_cache+aging_tokens_per_s=500"
    assert trace_replay.make_policy("fair:kv+session_fairness", 256)().name == "fair"


def test_capacity_is_the_lower_of_prefill_and_kv_bounds():
    one = [_rec("a0", "A", 0.0, 1.0, 160, 32, 100, kind="user_message"), _rec("a1", "A", 5.0, 1.0, 320, 32, 100, gap=3.0)]
    sessions = tw.sessions_from_trace(one)
    m = sim.ReplicaModel(prefill_overhead_ms=0.0, prefill_ms_per_token=1.0, itl_ms=10.0, kv_blocks=100)
    # turn 0: all 160 cold (0.16 s) + 32 x 10 ms, held 192 tokens through it and the 3 s gap; turn 1: 320 - 192
    # cached (blocks 100-111 of 16 written by turn 0) = 128 cold + 0.32 s decode, held 352 tokens
    assert tw.prefill_work_s(sessions, m, BS) == pytest.approx(0.16 + 0.128)
    assert tw.kv_token_seconds(sessions, m, BS) == pytest.approx(192 * (0.48 + 3.0) + 352 * (0.128 + 0.32))
    cap = tw.capacity(sessions, m, BS, 2)
    assert cap["sessions_per_s"] == min(cap["prefill_bound"], cap["kv_bound"])
    double = tw.capacity(sessions, sim.ReplicaModel(prefill_overhead_ms=0.0, prefill_ms_per_token=1.0, itl_ms=10.0,
                                                    kv_blocks=200), BS, 2)
    assert double["kv_bound"] == pytest.approx(2 * cap["kv_bound"]) and double["prefill_bound"] == cap["prefill_bound"]


def _shedding_replay(seed: int, policy: str, kv_blocks: int, retry: RetryPolicy):
    """8 programs with subagents on one replica at 3x its capacity that sheds after 0.5 s of queued prefill."""
    shape = TraceShape(sessions=8, seed=seed, subagent_share=1.0, system_tokens=(1_000, 3_000),
                       context_at_30=(20_000, 40_000), long_turns=(6, 12, 8), short_turns=(2, 4),
                       subagent_turns=(2, 4), block_size=64)
    sessions = tw.sessions_from_trace(generate(shape), 128)
    m = sim.ReplicaModel(kv_blocks=kv_blocks, shed_after_s=0.5, prefill_ms_per_token=1.0)  # sheds often
    sessions = tw.rescale(sessions, tw.load_factor(sessions, m, 128, 1, 3.0))
    flow = SessionFlow(sessions, 128, retry)
    res = sim.simulate(trace_replay.make_policy(policy, 128)(), 1, sessions, sim.Workload(block_size=128), m, flow)
    return sessions, flow, res


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), policy=st.sampled_from(["round-robin", "kv"]))
def test_without_retries_a_shed_request_ends_its_session_and_a_waiting_parent_goes_on(seed, policy):
    sessions, flow, res = _shedding_replay(seed, policy, 64, NO_RETRY)
    by: dict[int, list] = defaultdict(list)
    for r in flow.requests:
        by[r.session].append(r)
    assert sum(r.shed for r in flow.requests) == res.rejected > 0
    by_sid = {s.sid: s for s in sessions}
    for sid, rs in by.items():
        rs.sort(key=lambda r: r.turn)
        assert [r.turn for r in rs] == list(range(len(rs)))  # no turn twice, none skipped
        shed = [r.shed for r in rs]
        assert not any(shed[:-1])  # nothing after a shed request
        if not shed[-1]:
            assert len(rs) == len(by_sid[sid].turns)  # else the session ran to its end
    for s in sessions:  # a parent whose awaited subagent was shed went on past the join
        for k, (children, _) in s.joins.items():
            if (s.sid in by and len(by[s.sid]) >= k and not by[s.sid][k - 1].shed
                    and any(by[c][-1].shed for c in children if c in by)):
                assert len(by[s.sid]) > k
    assert all(not p.complete for p in flow.programs() if any(r.shed for r in flow.requests if r.session == p.root))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), policy=st.sampled_from(["round-robin", "kv", "kv+wait_for_cache"]))
def test_with_retries_a_shed_turn_comes_back_until_served_or_its_retries_are_spent(seed, policy):
    retry = RetryPolicy(max_retries=3)
    sessions, flow, res = _shedding_replay(seed, policy, 512, retry)
    assert sum(r.shed for r in flow.requests) == res.rejected
    by: dict[tuple[int, int], list] = defaultdict(list)
    for r in flow.requests:
        by[(r.session, r.turn)].append(r)
    cut_sessions = set()
    for (sid, _), rs in by.items():
        assert [r.attempt for r in rs] == list(range(len(rs))) and len(rs) <= retry.max_retries + 1
        assert all(r.shed and r.retried for r in rs[:-1])  # every attempt but the last was shed and retried
        for prev, nxt in zip(rs, rs[1:]):
            assert nxt.arrival == pytest.approx(prev.end + retry.retry_after_s)
            assert nxt.first_arrival == rs[0].arrival
        if rs[-1].shed:
            assert not rs[-1].retried and len(rs) == retry.max_retries + 1
            cut_sessions.add(sid)
    for sid in cut_sessions:  # nothing of a session after its cut turn
        last = max(k for (s, k) in by if s == sid)
        assert by[(sid, last)][-1].shed
