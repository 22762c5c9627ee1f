"""The per-condition live replay without vLLM: conditions parse into router.scheduling, every condition's graph is
the same but for it (bounds included, so the Router's queue exists in each), and `--vllm-replicas` reaches it."""

from __future__ import annotations

import pytest

from agentserve.bench import trace_live, trace_vllm
from agentserve.config import SchedulingSpec, ServeArgs


def _args(*extra: str):
    return trace_live.parser().parse_args(["t.jsonl", "--vllm-replicas", "2", "--kv-cache-gib", "0.2", *extra])


def test_named_conditions() -> None:
    fcfs, sessions = trace_vllm.parse_conditions("fcfs,sessions")
    assert fcfs == trace_vllm.Condition("fcfs", SchedulingSpec())
    assert sessions.name == "sessions"
    on = {k for k, v in sessions.scheduling.model_dump().items() if v is True and k != "shed_lowest"}
    assert on == {"wait_for_cache", "session_fairness", "interactive_first", "kv_pressure"}


def test_switches_numbers_and_labels() -> None:
    c = trace_vllm.parse_condition("short-wait:kv+wait_for_cache+max_cache_wait_s=5")
    assert c.name == "short-wait"
    assert c.scheduling.wait_for_cache and c.scheduling.max_cache_wait_s == 5.0
    assert trace_vllm.parse_condition("kv+session_fairness").name == "kv+session_fairness"
    assert trace_vllm.parse_condition("mine:sessions").scheduling == trace_vllm.parse_condition("sessions").scheduling


@pytest.mark.parametrize("bad", ["round-robin", "kv", "kv+nope", "kv+aging_tokens_per_s", "kv+max_cache_wait_s=-1",
                                 "fcfs,fcfs", ""])
def test_bad_conditions(bad: str) -> None:
    with pytest.raises(ValueError):
        trace_vllm.parse_conditions(bad)


def test_graph_args_differ_only_in_scheduling() -> None:
    args = _args("--max-in-flight", "3", "--max-prefill-tokens", "2048")
    fcfs, sessions = (trace_vllm.graph_args(args, c, f"/tmp/{c.name}") for c in trace_vllm.parse_conditions("fcfs,sessions"))
    for g in (fcfs, sessions):
        s = ServeArgs.model_validate(g)
        assert (s.engine.kind, s.engine.num_replicas, s.engine.kv_cache_gib) == ("vllm", 2, 0.2)
        assert (s.router.policy, s.router.max_in_flight_per_replica, s.router.max_prefill_tokens_per_replica) == ("kv", 3, 2048)
    assert ServeArgs.model_validate(fcfs).router.scheduling == SchedulingSpec()
    assert ServeArgs.model_validate(sessions).router.scheduling.session_fairness
    assert fcfs["state"] != sessions["state"]  # no kept turns or warm-start sessions carried across conditions
    strip = lambda g: {**g, "router": {**g["router"], "scheduling": None}, "state": None}  # noqa: E731
    assert strip(fcfs) == strip(sessions)


def test_vllm_replicas_starts_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(trace_vllm, "run", lambda args, argv: seen.append((args.vllm_replicas, args.conditions)) or 0)
    assert trace_live.main(["t.jsonl", "--vllm-replicas", "2", "--conditions", "fcfs,sessions"]) == 0
    assert seen == [(2, "fcfs,sessions")]


def test_plot(tmp_path) -> None:
    row = {"ttft_s": {"n": 3, "p50": 1.0, "p90": 2.0}, "output_tokens_per_s": 5.0, "cached_share": 0.5,
           "reprefilled_tokens": 100, "rate_529": 0.0,
           "completion_s": {name: {"n": 0} for name, _, _ in trace_vllm.trace_report.BUCKETS}}
    trace_vllm.plot([row | {"policy": "fcfs"}, row | {"policy": "sessions"}], tmp_path / "p.png", "t")
    assert (tmp_path / "p.png").stat().st_size > 0
