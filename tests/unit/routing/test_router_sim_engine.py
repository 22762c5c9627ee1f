"""The simulator's engine as vLLM v1 runs KV: running requests hold their blocks, a waiting request starts only
when its blocks fit, and a request that cannot grow preempts the last admitted one, which is recomputed later.
And the harness side: a shed (529) request is retried after its backoff, and only retries spent end a program."""

from __future__ import annotations

import pytest

from agentserve.bench import trace_report
from agentserve.offline import router_sim as sim
from agentserve.offline.session_flow import NO_RETRY, Program, RetryPolicy, Served, SessionFlow

BS = 16
W = sim.Workload(block_size=BS)


def _model(**kw) -> sim.ReplicaModel:
    base = dict(kv_blocks=10, prefill_ms_per_token=1.0, prefill_overhead_ms=0.0, itl_ms=20.0, itl_batch_slope=0.0,
                shed_after_s=1e9)
    return sim.ReplicaModel(**(base | kw))


def _session(sid: int, start: float, prompt: int, out: int) -> sim.Session:
    """One request of `prompt` + `out` tokens, its blocks its own (ids sid*1000 + i)."""
    ids = [sid * 1000 + i for i in range((prompt + out) // BS)]
    turn = sim.Turn(prompt, out, 0.0, blocks=ids[: prompt // BS], written=ids, kind="user_message")
    return sim.Session(sid, start, [], [turn])


def _run(sessions, m, retry=None, replicas=1):
    flow = SessionFlow(sessions, BS, retry)
    res = sim.simulate(sim.RoundRobin() if replicas == 1 else sim.Ours(BS, "kv"), replicas, sessions, W, m, flow=flow)
    return res, {r.session: r for r in flow.requests if not r.shed}, flow


def test_a_replica_whose_running_requests_outgrow_its_kv_preempts_the_last_admitted_and_recomputes_it():
    # 10 blocks of 16 tokens. A (64 + 80 tokens) and B (same, 10 ms later) fit with their prompts (4 + 4 blocks)
    # but not as they decode (9 + 9 blocks): when A needs a block and none is left, B (admitted last) is preempted.
    sessions = [_session(0, 0.0, 64, 80), _session(1, 0.01, 64, 80)]
    res, by, _ = _run(sessions, _model())
    a, b = by[0], by[1]
    assert res.preemptions == 1 and a.preemptions == 0 and b.preemptions == 1
    assert a.output_tokens == b.output_tokens == 80  # both run to their end
    assert b.end > a.end  # B resumed only when A's blocks came free
    # B lost what A's growth evicted of its blocks and prefilled it again (its prompt at least partly)
    assert 0 < b.recomputed_tokens <= 64 + 80 and res.recomputed_tokens == b.recomputed_tokens
    assert b.ttft < a.end  # its first token came before the preemption and is not taken again
    # the model before: nothing held, nothing preempted, B decodes beside A
    old, old_by, _ = _run(sessions, _model(pin_running=False))
    assert old.preemptions == 0 and old_by[1].end < a.end + 0.5 and old_by[1].recomputed_tokens == 0


def test_a_waiting_request_starts_only_when_its_blocks_fit():
    # A holds 8 blocks (then 9); C's 4 blocks do not fit beside it: C waits for A's end, though the prefill slot
    # is free the whole time.
    sessions = [_session(0, 0.0, 128, 16), _session(1, 0.2, 64, 16)]
    res, by, _ = _run(sessions, _model())
    a, c = by[0], by[1]
    assert res.preemptions == 0
    assert c.ttft >= a.end  # its prefill began only after A freed its blocks
    old, old_by, _ = _run(sessions, _model(pin_running=False))
    assert old_by[1].ttft < a.end


def test_preempted_during_its_prefill_a_request_keeps_the_part_it_computed_cached():
    # 10 blocks. A (48 + 96 tokens) decodes; B's 128-token prompt prefills in chunks of 32 at 4 ms a token (0.128 s
    # each, from 0.096 s). At 0.436 s A needs its 5th block while B, admitted last, holds 6 in its 3rd chunk (2/3
    # done): B is preempted, its computed full blocks (5) stay cached, evictable. A's growth to 9 blocks evicts all
    # but B's first; B starts again when A ends and recomputes what it lost: about 85 tokens less the 16 left.
    sessions = [_session(0, 0.0, 48, 96), _session(1, 0.06, 128, 16)]
    res, by, _ = _run(sessions, _model(prefill_chunk_tokens=32, prefill_ms_per_token=4.0))
    a, b = by[0], by[1]
    assert res.preemptions == 1 and b.preemptions == 1 and a.preemptions == 0
    assert b.ttft >= a.end  # its first token only after it started again
    assert 64 - 16 < b.recomputed_tokens <= 96 - 16  # more than its two whole chunks, less than three
    assert a.output_tokens == 96 and b.output_tokens == 16


def test_a_shed_request_is_retried_after_its_backoff_and_its_program_completes():
    # A's 1 s prefill is queued when B arrives: B is shed (more than 0.5 s of prefill pending), retried after the
    # retry-after (2 s), and served.
    sessions = [_session(0, 0.0, 1024, 16), _session(1, 0.1, 64, 16)]
    m = _model(kv_blocks=1000, shed_after_s=0.5)
    res, by, flow = _run(sessions, m)
    attempts = [r for r in flow.requests if r.session == 1]
    assert [(r.shed, r.retried, r.attempt) for r in attempts] == [(True, True, 0), (False, False, 1)]
    assert attempts[1].arrival == pytest.approx(0.1 + 2.0) and attempts[1].first_arrival == pytest.approx(0.1)
    assert res.rejected == 1 and all(p.complete for p in flow.programs())
    row = trace_report.summarize(flow.requests, flow.programs())
    assert row["retries"] == 1 and row["requests_cut"] == 0 and row["programs_incomplete"] == 0
    assert row["shed_rate"] == pytest.approx(1 / 3)  # one of three attempts
    assert row["ttft_incl_retries_s"]["p90"] > row["ttft_s"]["p90"]  # the harness waited the backoff too
    assert attempts[1].ttft - attempts[1].first_arrival == pytest.approx(2.0 + 0.064 + 0.02)
    # without retries the 529 ends B's program
    _, _, flow0 = _run(sessions, m, NO_RETRY)
    assert [p.complete for p in sorted(flow0.programs(), key=lambda p: p.root)] == [True, False]


def test_retries_spent_end_the_program():
    sessions = [_session(0, 0.0, 10_000, 16), _session(1, 0.1, 64, 16)]  # A prefills 10 s: B is shed each time
    _, _, flow = _run(sessions, _model(kv_blocks=1000, shed_after_s=0.5), RetryPolicy(max_retries=2))
    attempts = [r for r in flow.requests if r.session == 1]
    assert [r.retried for r in attempts] == [True, True, False] and all(r.shed for r in attempts)
    assert [r.arrival for r in attempts] == pytest.approx([0.1, 2.1, 4.1])
    assert not next(p for p in flow.programs() if p.root == 1).complete


def test_exponential_backoff_without_retry_after():
    import random

    p, rng = RetryPolicy(retry_after_s=None), random.Random(0)
    delays = [p.delay(n, rng) for n in range(1, 8)]
    for n, d in enumerate(delays, start=1):
        top = min(0.5 * 2 ** (n - 1), 8.0)
        assert 0.75 * top <= d <= top


def test_sustained_throughput_counts_tokens_generated_inside_the_arrival_window():
    programs = [Program(i, 1, float(i), float(i) + 5, True) for i in range(11)]  # arrivals at 0..10 s
    assert trace_report.sustained_window(programs) == (5.0, 9.0)  # 50% and 95% of the arrivals
    reqs = [Served(0, 0, "x", 0.0, 4.0, 6.0, 10, 0, 0, 100, False),  # half its decode inside [5, 9]
            Served(1, 0, "x", 0.0, 6.0, 8.0, 10, 0, 0, 40, False),  # all inside
            Served(2, 0, "x", 0.0, 9.5, 12.0, 10, 0, 0, 70, False),  # after
            Served(3, 0, "x", 0.0, 5.0, 5.0, 10, 0, 0, 0, True)]  # shed
    assert trace_report.tokens_within(reqs, 5.0, 9.0) == pytest.approx(50 + 40)
    row = trace_report.summarize(reqs, programs)
    assert row["sustained_output_tokens_per_s"] == pytest.approx(90 / 4)
