"""KV-pressure awareness (routing/kv_pressure.py) and waiting for the cache (KvRouter, scheduling.wait_for_cache):
which idle sessions keep their blocks, what is admitted beside them, where a session that gave its blocks up goes."""

from __future__ import annotations

from agentserve.protocol import AgentHints, RouteRequest
from agentserve.routing.cost import CostConfig
from agentserve.routing.kv_pressure import KvPressure
from agentserve.routing.kv_router import KvRouter, RouterConfig
from agentserve.routing.scheduling import SchedulingConfig

BS = 16


def req(i: int, session: str, blocks: int, *, continues: bool = False, prefix: str | None = None) -> RouteRequest:
    """`blocks` full blocks of prompt, no expected output (osl 0): the request holds exactly `blocks` blocks."""
    return RouteRequest.model_construct(
        request_id=f"r{i}", model="m", block_hashes=[hash((prefix or session, k)) for k in range(blocks)],
        prompt_tokens=blocks * BS, max_tokens=64, hints=AgentHints(session_id=session, kind="tool_result", osl=0),
        session_key=session, parent_session_key="", tenant="", continues=continues,
    )  # fmt: skip


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def pressure() -> KvPressure:
    kv = KvPressure(high_watermark=0.9, keep_gap_s=30.0, max_sessions=100)
    kv.set_capacity("e0", 100)
    return kv


def idle(kv: KvPressure, session: str, blocks: int, at: float, replica: str = "e0") -> None:
    kv.started(f"{session}@{at}", session, replica, blocks, 0)
    kv.ended(f"{session}@{at}", at)


def test_the_most_recently_active_idle_sessions_keep_their_blocks_within_the_watermark():
    kv = pressure()
    for at, (s, n) in enumerate([("a", 30), ("b", 30), ("c", 40)]):
        idle(kv, s, n, float(at))
    # budget 90 blocks: c (40) and b (30) fit, a (30, idle longest) is given up, as the engine's LRU would
    assert kv.kept("e0", 3.0) == {"c": 40, "b": 30}
    assert kv.gave_up("a", 3.0) and not kv.gave_up("b", 3.0)
    # running requests take from the budget first: with 40 running only c is kept
    kv.started("x", "x", "e0", 40, 0)
    assert kv.kept("e0", 3.0) == {"c": 40}


def test_new_work_that_would_evict_kept_sessions_is_not_admitted_but_a_returning_kept_session_is():
    kv = pressure()
    idle(kv, "b", 30, 1.0)
    idle(kv, "c", 40, 2.0)
    assert not kv.admits("e0", "new", 25, in_flight=1, now=3.0)  # 70 kept + 25 > 90
    assert kv.admits("e0", "new", 20, in_flight=1, now=3.0)  # 90: fits
    assert kv.admits("e0", "c", 45, in_flight=1, now=3.0)  # its blocks are there
    assert kv.admits("e0", "new", 25, in_flight=0, now=3.0)  # a replica that runs nothing takes anything
    assert kv.admits("e1", "new", 1000, in_flight=3, now=3.0)  # capacity unknown: no KV bound
    # past the tool-gap horizon an idle session no longer holds room
    assert kv.admits("e0", "new", 25, in_flight=1, now=2.0 + 31.0)


def router(clock: Clock, **sched) -> KvRouter:
    cfg = RouterConfig(cost=CostConfig(block_size=BS, max_in_flight=4), expire_after_s=1e9, lease_s=1e9,
                       scheduling=SchedulingConfig(**sched))
    r = KvRouter(cfg, clock=clock)
    for name in ("e0", "e1"):
        r.register(name, events=True, kv_blocks=100)
    return r


def test_the_router_defers_a_session_no_replica_has_room_for_and_admits_returning_kept_sessions():
    clock = Clock()
    r = router(clock, kv_pressure=True)
    placed = {}
    for i, s in enumerate(["a", "b"]):  # two 80-block sessions, one per replica (bounded spread)
        placed[s] = r.try_route(req(i, s, 80)).replica_id
        clock.t += 1
        r.release(f"r{i}")
    assert sorted(placed.values()) == ["e0", "e1"]
    busy = r.try_route(req(10, "busy", 2))  # something runs on one replica, a second keeps the other busy
    busy2 = r.try_route(req(11, "busy2", 2))
    assert {busy.replica_id, busy2.replica_id} == {"e0", "e1"}
    # A new 40-block session fits nowhere beside the kept sessions: it waits rather than evict one.
    assert r.try_route(req(20, "new", 40)) is None
    assert r.counters["kv_deferred"] >= 1
    # The kept sessions' next turns are admitted where their blocks are.
    assert r.try_route(req(21, "a", 82, continues=True, prefix="a")).replica_id == placed["a"]
    assert r.kept_sessions(placed["b"]) == {"b": 80.0}
    # Once b's tool gap outlasts the horizon, its room goes to the waiting session.
    clock.t += 31
    assert r.try_route(req(22, "new", 40)).replica_id == placed["b"]


def test_a_session_that_gave_its_blocks_up_is_placed_where_there_is_room_not_sent_home():
    clock = Clock()
    r = router(clock, kv_pressure=True, kv_keep_gap_s=5.0)
    home = r.try_route(req(0, "old", 60)).replica_id
    r.release("r0")
    clock.t += 1
    other = r.try_route(req(1, "other", 10)).replica_id
    assert other != home
    r.release("r1")
    # The old session idles past the horizon; its home fills with a long-running session ...
    clock.t += 10
    filler = r.try_route(req(2, "filler", 85))
    assert filler.replica_id is not None
    # ... where filler went is the home (spread) or not; either way the old session's blocks are gone (no events
    # stored) and it goes where there is room, not back to a home that would have to evict for it.
    back = r.try_route(req(3, "old", 62, continues=True, prefix="old"))
    assert back is not None and back.replica_id != filler.replica_id


def test_wait_for_cache_holds_a_session_for_its_saturated_home_instead_of_a_free_cold_replica():
    for wait in (False, True):
        clock = Clock()
        cfg = RouterConfig(cost=CostConfig(block_size=BS, max_in_flight=1), expire_after_s=1e9, lease_s=1e9,
                           scheduling=SchedulingConfig(wait_for_cache=wait))
        r = KvRouter(cfg, clock=clock)
        for name in ("e0", "e1"):
            r.register(name, events=True)
        home = r.try_route(req(0, "s", 64)).replica_id
        r.stored_hashes(home, [hash(("s", k)) for k in range(64)])
        r.release("r0")
        assert r.route_to(req(1, "t", 2), home) is not None  # one slot per replica: another request takes the home's
        d = r.try_route(req(2, "s", 66, continues=True))
        if wait:
            assert d is None  # waits for the replica holding its 64 blocks
            r.release("r1")
            assert r.try_route(req(2, "s", 66, continues=True)).replica_id == home
        else:
            assert d.replica_id != home  # today: re-prefills 64 blocks on the free replica


def test_a_request_waits_for_its_cache_only_max_cache_wait_s_then_takes_a_free_replica():
    clock = Clock()
    cfg = RouterConfig(cost=CostConfig(block_size=BS, max_in_flight=1), expire_after_s=1e9, lease_s=1e9,
                       scheduling=SchedulingConfig(wait_for_cache=True, max_cache_wait_s=5.0))
    r = KvRouter(cfg, clock=clock)
    for name in ("e0", "e1"):
        r.register(name, events=True)
    home = r.try_route(req(0, "s", 64)).replica_id
    r.stored_hashes(home, [hash(("s", k)) for k in range(64)])
    r.release("r0")
    r.route_to(req(1, "t", 2), home)
    assert r.try_route(req(2, "s", 66, continues=True)) is None
    clock.t = 4.9
    assert r.try_route(req(2, "s", 66, continues=True)) is None
    clock.t = 5.0
    assert r.try_route(req(2, "s", 66, continues=True)).replica_id not in (None, home)


def test_the_queue_places_a_waiter_again_once_its_cache_wait_is_over_even_if_its_replica_stays_full():
    got: list[str] = []
    clock = Clock()
    cfg = RouterConfig(cost=CostConfig(block_size=BS, max_in_flight=1), expire_after_s=1e9, lease_s=1e9,
                       scheduling=SchedulingConfig(wait_for_cache=True, max_cache_wait_s=5.0))
    r = KvRouter(cfg, clock=clock)
    for name in ("e0", "e1"):
        r.register(name, events=True)
    home = r.try_route(req(0, "s", 64)).replica_id
    r.stored_hashes(home, [hash(("s", k)) for k in range(64)])
    r.release("r0")
    r.route_to(req(1, "t", 2), home)
    other = r.try_route(req(3, "u", 2, prefix="u"))
    assert other is not None and other.replica_id != home  # both replicas full now
    assert r.offer(req(2, "s", 66, continues=True), lambda d: got.append(d.replica_id), lambda e: got.append("x")) is None
    clock.t = 6.0
    r.release("r3")  # the other replica frees up; the home stays full
    assert got == [other.replica_id]



def test_holds_count_from_the_first_try_and_are_bounded():
    from agentserve.routing.holds import Holds

    h = Holds(max_held=4)
    assert h.hold("a", "cache", 1.0) == 1.0 and h.hold("a", "cache", 3.0) == 1.0
    assert h.waited("a", "cache", 4.0) == 3.0 and h.waited("a", "kv", 4.0) == 0.0
    h.hold("a", "kv", 2.0)
    h.drop("a")
    assert len(h) == 0
    for i in range(10):
        h.hold(f"x{i}", "cache", float(i))
    assert len(h) == 4 and h.waited("x0", "cache", 10.0) == 0.0 and h.waited("x9", "cache", 10.0) == 1.0
