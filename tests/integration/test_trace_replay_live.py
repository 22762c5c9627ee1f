"""A synthetic agent trace replayed live through the real graph (2 scripted engine replicas) with the anthropic SDK:
every request answered, later turns read their earlier turns from the prefix cache, subagents start after their
spawning request and a waiting parent after them."""

from __future__ import annotations

import argparse
import asyncio

import anthropic
import pytest

from agentserve.bench.trace_live import LiveReplay
from agentserve.bench.trace_report import summarize
from agentserve.offline import trace_workload as tw
from agentserve.traces.synthetic import TraceShape, generate
from tests.support.graph import running_graph

pytestmark = pytest.mark.integration

RULES = [{"match": "", "reply": "Done. Next step?", "itl_ms": 1}]


@pytest.fixture(scope="module")
def url(model_path):
    args = {"engine": {"kind": "scripted", "block_size": 16, "rules": RULES, "num_replicas": 2,
                       "cache": {"capacity_blocks": 8192, "prefill_ms_per_token": 0.05}}}
    with running_graph(args) as u:
        yield u


def test_trace_replayed_live(url):
    shape = TraceShape(sessions=3, seed=2, subagent_share=1.0, short_share=0.0, long_turns=(5, 8, 6),
                       subagent_turns=(2, 3), session_rate=1.0, harnesses=1, block_size=64)
    sessions = tw.sessions_from_trace(generate(shape))
    args = argparse.Namespace(model="smollm2", token_scale=0.02, time_scale=0.02, speedup=10.0, retries=3)
    client = anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0, timeout=60)
    replay = LiveReplay(client, sessions, args, 64)
    asyncio.run(replay.run())
    assert len(replay.requests) == sum(len(s.turns) for s in sessions)
    assert not any(r.shed for r in replay.requests) and replay.overloaded == 0
    served = {(r.session, r.turn): r for r in replay.requests}
    later = [r for r in replay.requests if r.turn > 0]
    assert sum(r.cached_tokens > 0 for r in later) >= 0.8 * len(later)  # each turn extends the one before
    for s in sessions:
        for k, children in s.spawns.items():
            assert all(served[(c, 0)].arrival >= served[(s.sid, k)].end for c in children)
        for k, (children, _) in s.joins.items():
            last = max(served[(c, len(replay.by_id[c].turns) - 1)].end for c in children)
            assert served[(s.sid, k)].arrival >= last
    report = summarize(replay.requests, replay.programs())
    assert report["cached_share"] > 0.5 and report["programs"] == 3 and report["shed_rate"] == 0
