"""The router simulator's baselines get the information agentserve's router gets where they would use it:
session affinity keeps a session on one replica (and moves it only past the imbalance threshold), and the
events-fed prefix-affinity router knows what the replicas really cache, not what it routed to them."""

from __future__ import annotations

from agentserve.offline import router_sim as sim


def _replicas(n: int, ongoing: list[int] | None = None) -> list[sim.Replica]:
    reps = [sim.Replica(i, sim.KvPool(64)) for i in range(n)]
    for rep, busy in zip(reps, ongoing or [0] * n):
        rep.decoding = busy
    return reps


def _request(sid: int, blocks: list[int], rid: int = 0) -> sim.Request:
    session = sim.Session(sid=sid, start_s=0.0, blocks=blocks, turns=[])
    return sim.Request(rid, session, 0, 0.0, len(blocks) * 128, 10, blocks)


def test_a_session_stays_on_its_replica_until_that_replica_is_overloaded():
    router, reps = sim.SessionAffinity(), _replicas(4)
    home = router.route(_request(7, [1, 2]), reps, 0.0)
    assert all(router.route(_request(7, [1, 2, 3], rid=k), reps, 0.0) == home for k in range(5))
    reps[home].decoding = 11  # more than 10 ongoing over the least loaded: the session moves
    moved = router.route(_request(7, [1, 2, 3, 4]), reps, 0.0)
    assert moved != home
    reps[home].decoding = 0
    assert router.route(_request(7, [1, 2, 3, 4, 5]), reps, 0.0) == moved  # and stays where it went


def test_prefix_affinity_with_kv_events_follows_the_caches_not_its_own_decisions():
    reps = _replicas(3)
    learned, told = sim.PrefixAffinity(128), sim.PrefixAffinity(128, events=True)
    first = _request(1, [11, 12, 13, 14])
    assert learned.route(first, reps, 0.0) == told.route(first, reps, 0.0) == 0  # all empty: the first replica
    told.stored(2, [11, 12, 13, 14])  # but replica 2 computed these blocks
    second = _request(2, [11, 12, 13, 14, 15])
    assert learned.route(second, reps, 0.0) == 0  # it believes its own decision
    assert told.route(second, reps, 0.0) == 2  # it knows where the blocks are
    told.removed(2, [11, 12, 13, 14])  # evicted: nothing to follow, so the least loaded replica wins
    reps[2].decoding = 2
    assert told.route(_request(3, [11, 12, 13, 14, 15]), reps, 0.0) != 2


def test_every_router_serves_or_sheds_every_request_of_a_small_trace():
    w = sim.Workload(sessions=40, turns=(2, 4), seed=3)
    sessions = sim.make_sessions(w, 2.0)
    for make in sim.routers(w.block_size):
        res = sim.simulate(make(), 4, sessions, w, sim.ReplicaModel())
        assert res.served + res.rejected == res.requests > 0, res.router
