"""The simulator with agentserve's router queue in the loop (Ours with scheduling): every turn is served or shed,
nothing is left waiting or leased, and the queue actually holds requests under load."""

from __future__ import annotations

import pytest

from agentserve.offline import router_sim as sim
from agentserve.offline.session_flow import SessionFlow
from agentserve.routing.scheduling import SchedulingConfig


@pytest.mark.parametrize("sched", [SchedulingConfig(), SchedulingConfig(wait_for_cache=True),
                                   SchedulingConfig(wait_for_cache=True, session_fairness=True,
                                                    interactive_first=True, kv_pressure=True)])
def test_every_turn_is_served_or_shed_and_the_router_ends_empty(sched):
    w = sim.Workload(sessions=60, seed=3)
    m = sim.ReplicaModel(kv_blocks=256)
    sessions = sim.make_sessions(w, session_rate=2.0)  # far over what 2 replicas prefill: the queue fills
    router = sim.Ours(w.block_size, "kv", sched, max_prefill_tokens=2048, max_wait_s=5.0)
    flow = SessionFlow(sessions, w.block_size)
    res = sim.simulate(router, 2, sessions, w, m, flow=flow)
    assert res.requests == len(flow.requests) and res.served + res.rejected == res.requests
    assert router._r.counters["queued"] > 0 and res.served > 0
    assert router._r.waiting == 0 and router._r.in_flight == 0
    if sched.kv_pressure:
        assert router.kv_use(0)[2] == 256  # the replicas registered their KV capacity
