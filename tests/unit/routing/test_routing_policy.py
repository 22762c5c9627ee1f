"""Cost policy, load accounting, admission and replica membership of KvRouter (no Ray)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.kv_events.format import BlockStored
from agentserve.kv_events.block_hash import block_hashes
from agentserve.protocol import AgentHints, RouteRequest
from agentserve.protocol.errors import RequestError
from agentserve.routing.cost import CostConfig
from agentserve.routing.kv_router import KvRouter, RouterConfig

BS = 4


def req(i, tokens, session=None, priority=0, osl=None, kind="other", parent="") -> RouteRequest:
    return RouteRequest(
        request_id=f"r{i}", model="m", block_hashes=block_hashes(tokens, BS), prompt_tokens=len(tokens),
        max_tokens=16, hints=AgentHints(session_id=session, priority=priority, osl=osl, kind=kind),
        session_key=session or "", parent_session_key=parent,
    )


def make(policy="kv", now=None, **cost) -> KvRouter:
    clock = (lambda: now[0]) if now else None
    cfg = RouterConfig(cost=CostConfig(block_size=BS, overlap_weight=8, **cost), policy=policy, max_waiting=2,
                       max_wait_s=0.5, expire_after_s=10)
    r = KvRouter(cfg, clock=clock) if clock else KvRouter(cfg)
    for name in "ab":
        r.register(name, events=policy == "kv")
    return r


def store(r: KvRouter, replica: str, tokens: list[int]) -> None:
    n = len(tokens) // BS
    r.apply_events(replica, [BlockStored(block_hashes=[f"{replica}{i}".encode() for i in range(n)],
                                         parent_block_hash=None, token_ids=tokens[: n * BS], block_size=BS,
                                         lora_id=None, medium="GPU", lora_name=None)])


def test_prefix_wins_until_load_outweighs_it():
    r = make()
    prompt = list(range(40))
    store(r, "b", prompt)
    d = r.try_route(req(0, prompt + [99, 98, 97, 96]))
    assert (d.replica_id, d.overlap_blocks, d.reason) == ("b", 10, "prefix")
    # Pile pending prefill onto b: eventually a cold replica is cheaper.
    for i in range(1, 6):
        r.try_route(req(i, list(range(1000 * i, 1000 * i + 80))))
    assert r.load("b").prefill_tokens > 0 or r.load("a").prefill_tokens > 0
    for i in range(6, 12):
        r._load.start(f"x{i}", "b", 200, 0)  # noqa: SLF001 - pending prefill on b
    assert r.try_route(req(20, prompt + [5, 5, 5, 5])).replica_id == "a"


def test_first_token_and_release_return_load():
    r = make()
    r.try_route(req(0, list(range(40))))
    rep = "a" if r.load("a").in_flight else "b"
    assert r.load(rep).prefill_tokens == 40
    r.first_token("r0")
    assert r.load(rep).prefill_tokens == 0 and r.load(rep).in_flight == 1
    r.release("r0")
    r.release("r0")
    assert r.load(rep).in_flight == 0 and r.load(rep).active_blocks == pytest.approx(0)


def test_requests_another_router_leased_count_in_the_load_and_saturate_a_replica():
    """Two Router replicas each lease what they route; a heartbeat lists everything an engine runs, so each Router
    counts the other's requests in that engine's load (as its own leases' size there, else a default one)."""
    r = make(max_in_flight=3)
    r.try_route(req(0, list(range(40))))
    mine = "a" if r.load("a").in_flight else "b"
    other = "b" if mine == "a" else "a"
    own_blocks = r.load(mine).active_blocks
    r.renew(["r0", "elsewhere-1", "elsewhere-2"], mine)
    assert r.load(mine).in_flight == 3 and r.load(mine).active_blocks == pytest.approx(3 * own_blocks)
    r.renew(["elsewhere-3"], other)
    assert r.load(other).in_flight == 1 and r.load(other).active_blocks > 0  # no lease there to size it by
    assert r.try_route(req(1, list(range(500, 540)))).replica_id == other  # `mine` is saturated by the others'
    r.report([], ["elsewhere-1", "elsewhere-2"], mine)  # their end reports reach every Router at once
    assert r.load(mine).in_flight == 1 and r.load(mine).active_blocks == pytest.approx(own_blocks)
    r.report(["elsewhere-4"], [], mine)  # a first token of another Router's request: counted until it ends
    assert r.load(mine).in_flight == 2
    r.renew(["r0"], mine)  # the heartbeat: what the replica runs now
    assert r.load(mine).in_flight == 1


def test_a_session_stays_unless_another_replica_saves_it_more_than_stay_tokens():
    # weight 8, 4-token blocks: 8 tokens of pending prefill cost 16 units; stay_tokens=16 tolerates 32.
    r = make(session_stay_tokens=16)
    home = r.try_route(req(0, list(range(8)), session="s")).replica_id
    other = "b" if home == "a" else "a"
    r.release("r0")
    r._load.start("x1", home, 8, 0)  # noqa: SLF001 - pending prefill on home, less than the stay threshold
    assert r.try_route(req(1, list(range(500, 508)), session="s")).replica_id == home
    r.release("r1")
    r._load.start("x2", home, 40, 0)  # noqa: SLF001 - now another replica saves more than 16 tokens
    assert r.try_route(req(2, list(range(600, 608)), session="s")).replica_id == other
    # Without a session, the same load difference moves the request at once.
    r2 = make(session_stay_tokens=16)
    r2._load.start("x", "a", 8, 0)  # noqa: SLF001
    assert r2.try_route(req(3, list(range(700, 708)))).replica_id == "b"


def _homed(session: str) -> tuple[KvRouter, str, str]:
    """A router whose `session` lives on one replica, now a little busier than the other (less than stay_tokens)."""
    r = make(session_stay_tokens=16)
    home = r.try_route(req(0, list(range(8)), session=session)).replica_id
    r.release("r0")
    r._load.start("x1", home, 8, 0)  # noqa: SLF001 - pending prefill on home: a free request would go elsewhere
    return r, home, "b" if home == "a" else "a"


def test_affinity_follows_the_callers_session_key_not_the_session_id_it_names():
    r, home, other = _homed("caller-1/s")
    assert r.try_route(req(1, list(range(100, 108)), session="caller-1/s")).replica_id == home
    r.release("r1")
    # Another caller naming the same session id gets another key: it cannot pull itself onto (or steer) the home.
    stranger = req(2, list(range(200, 208)), session="caller-2/s")
    stranger = stranger.model_copy(update={"hints": AgentHints(session_id="caller-1/s")})
    assert r.try_route(stranger).replica_id == other


def test_a_compaction_is_placed_as_a_new_prefix_and_its_replica_becomes_home():
    r, home, other = _homed("s")
    # The summary prompt shares nothing the old home holds beyond what any replica has: placed on cost alone.
    assert r.try_route(req(1, list(range(300, 308)), session="s", kind="compaction")).replica_id == other
    r.release("r1")
    r._load.start("x2", other, 16, 0)  # noqa: SLF001 - now the new home is the busier one, within stay_tokens
    assert r.try_route(req(2, list(range(400, 408)), session="s", kind="user_message")).replica_id == other


def test_a_subagents_first_request_goes_where_its_parent_is_and_stays_there():
    r, home, other = _homed("parent")
    child = req(1, list(range(500, 508)), session="parent/agent-1", kind="subagent_spawn", parent="parent")
    assert r.try_route(child).replica_id == home
    r.release("r1")
    # Its later turns follow its own home; a session whose parent the router never saw is placed freely.
    assert r.try_route(req(2, list(range(600, 608)), session="parent/agent-1", parent="parent")).replica_id == home
    orphan = req(3, list(range(700, 708)), session="other/agent", kind="subagent_spawn", parent="unknown")
    assert r.try_route(orphan).replica_id == other


SYSTEM = list(range(1000, 1064))  # a shared system prompt both sessions' first turns start with


def test_new_sessions_spread_over_replicas_instead_of_crowding_the_one_caching_their_prompt():
    now = [0.0]
    crowd = make(now=now, session_spread=None)
    spread = make(now=now)
    for r in (crowd, spread):
        store(r, "b", SYSTEM)
    placed = {"crowd": [], "spread": []}
    for i in range(8):
        for name, r in (("crowd", crowd), ("spread", spread)):
            d = r.try_route(req(i, SYSTEM + [i] * 8, session=f"s{i}"))
            placed[name].append(d.replica_id)
            r.release(f"r{i}")
        now[0] += 1
    assert placed["crowd"] == ["b"] * 8
    assert sorted(placed["spread"].count(x) for x in "ab") == [4, 4]
    # A session's later turns stay where it started, whichever replica caches the system prompt.
    for i in range(8):
        d = spread.try_route(req(100 + i, SYSTEM + [i] * 8 + [7, 7, 7, 7], session=f"s{i}"))
        assert d.replica_id == placed["spread"][i]
        spread.release(f"r{100 + i}")


def test_a_later_turn_this_router_never_placed_goes_where_its_prefix_is_not_by_the_spread_bound():
    """Its own Router replica died: the next in rank has the same index but no home for the session. A later turn
    (the conversation has a reply) goes to the replica holding its prefix, though that one carries the most
    sessions; a first turn there would be spread."""
    now = [0.0]
    r = make(now=now)
    earlier = SYSTEM + [9] * 8  # the orphan's previous turn, cached on b
    store(r, "b", earlier)
    for i in range(4):  # b carries sessions: a new one is steered to a
        r.try_route(req(i, SYSTEM + [i] * 8, session=f"busy{i}"))
        r._load.release(f"r{i}")  # noqa: SLF001 - ended; they still count as carried
    first = r.try_route(req(10, SYSTEM + [8] * 8, session="new"))
    assert first.replica_id == "a"  # a first turn is spread
    for n in (11, 12):  # and the orphan's turns stay where their prefix is
        later = req(n, earlier + [7] * 4 * (n - 10), session="orphan").model_copy(update={"continues": True})
        placed = r.try_route(later)
        assert placed.replica_id == "b" and placed.overlap_blocks >= len(earlier) // BS


def test_sessions_idle_past_resident_s_no_longer_count():
    now = [0.0]
    r = make(now=now)
    store(r, "b", SYSTEM)
    assert r.try_route(req(0, SYSTEM + [0] * 8, session="s0")).replica_id == "b"
    r.release("r0")
    assert r.try_route(req(1, SYSTEM + [1] * 8, session="s1")).replica_id == "a"  # b carries more than the mean
    r.release("r1")
    now[0] = 31  # both sessions idle past resident_s (30 s): b is free to take the next new session again
    for replica in "ab":
        r.heartbeat(replica)
    assert r.try_route(req(2, SYSTEM + [2] * 8, session="s2")).replica_id == "b"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.booleans(), st.floats(0, 20)), min_size=1, max_size=60))
def test_a_new_session_never_goes_to_a_replica_over_the_spread_bound(steps):
    """Bounded loads: the replica a new session is placed on carried at most spread x the mean sessions seen in
    the last resident_s, counted here from the router's own decisions."""
    now = [0.0]
    r = make(now=now)
    r.register("c", events=True)
    store(r, "b", SYSTEM)
    seen: dict[str, tuple[str, float]] = {}
    for i, (session, shared, dt) in enumerate(steps):
        now[0] += dt
        for replica in "abc":
            r.heartbeat(replica)
        tokens = (SYSTEM if shared else []) + [session] * 8 + [i] * 4
        carried = {x: 0 for x in "abc"}
        for replica, at in seen.values():
            if at > now[0] - 30:
                carried[replica] += 1
        d = r.try_route(req(i, tokens, session=f"s{session}"))
        r.release(f"r{i}")
        if f"s{session}" not in seen:
            assert carried[d.replica_id] <= 1.1 * sum(carried.values()) / 3
        seen[f"s{session}"] = (d.replica_id, now[0])


def test_approx_policy_learns_from_its_own_decisions():
    r = make(policy="approx")
    prompt = list(range(64))
    first = r.try_route(req(0, prompt)).replica_id
    r.release("r0")
    d = r.try_route(req(1, prompt + [1, 2, 3, 4]))
    assert d.replica_id == first and d.overlap_blocks == 16


def test_dead_replica_leaves_index_load_and_sessions():
    now = [0.0]
    r = make(now=now)
    store(r, "a", list(range(40)))
    r.try_route(req(0, list(range(40)), session="s"))
    now[0] = 5
    r.heartbeat("b")
    now[0] = 12  # a is silent past expire_after_s
    d = r.try_route(req(1, list(range(40)), session="s"))
    assert r.replicas() == ["b"] and d.replica_id == "b" and d.overlap_blocks == 0
    assert r.heartbeat("a") is False  # it must register again
    r.register("a", events=True)
    assert r.overlaps(block_hashes(list(range(40)), BS)).get("a", 0) == 0


def test_saturation_queues_by_priority_then_sheds_never_hangs():
    async def go():
        r = make(max_in_flight=1)
        r.try_route(req(0, [1] * 8))
        r.try_route(req(1, [2] * 8))  # both replicas now full
        low = asyncio.create_task(r.route(req(2, [3] * 8, priority=0)))
        await asyncio.sleep(0)
        high = asyncio.create_task(r.route(req(3, [4] * 8, priority=5)))
        await asyncio.sleep(0)
        with pytest.raises(RequestError) as full:  # queue holds 2
            await r.route(req(4, [5] * 8))
        assert full.value.kind == "overloaded" and full.value.retry_after is not None
        r.release("r0")  # one slot: the high-priority request goes first
        await asyncio.sleep(0.05)
        assert high.done() and not low.done()
        assert (await high).replica_id is not None
        with pytest.raises(RequestError):  # nothing else frees up: shed after max_wait_s
            await low
        return r.rejected

    assert asyncio.run(go()) == 2


def test_no_replicas_defers_to_serve():
    r = KvRouter(RouterConfig(cost=CostConfig(block_size=BS)))
    assert r.try_route(req(0, [1, 2, 3])).replica_id is None
