"""Each routing policy behind the RoutingPolicy protocol (agentserve/routing/policies), alone and inside KvRouter,
and switching policy in place (no Ray)."""

from __future__ import annotations

import random
import time
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.config import RouterSpec
from agentserve.protocol import AgentHints, RouteRequest
from agentserve.routing import KvRouter, RouterConfig
from agentserve.routing.approx import ApproxIndex
from agentserve.routing.cost import Candidate, CostConfig, cost, saturated
from agentserve.routing.index import PrefixIndex
from agentserve.routing.load import ReplicaLoad
from agentserve.routing.policies import (
    POLICIES,
    ApproxPolicy,
    KvPolicy,
    LeastLoadedPolicy,
    Placement,
    PolicyName,
    PrefixIndexes,
    RoundRobinPolicy,
    RoutingPolicy,
    make_policy,
)

BS = 4
NAMES = tuple(POLICIES)
BY_COST = ("kv", "approx", "least_loaded")


def route_req(i: int, hashes: list[int], prompt_tokens: int | None = None, session: str = "") -> RouteRequest:
    return RouteRequest(request_id=f"r{i}", model="m", block_hashes=hashes,
                        prompt_tokens=BS * len(hashes) if prompt_tokens is None else prompt_tokens, max_tokens=8,
                        session_key=session)  # fmt: skip


def router(policy: str = "kv", replicas: str = "ab", now: list[float] | None = None, **cost_kw) -> KvRouter:
    cost_cfg = CostConfig(block_size=BS, overlap_weight=8, **cost_kw)
    cfg = RouterConfig(cost=cost_cfg, policy=policy, expire_after_s=10)  # type: ignore[arg-type]
    r = KvRouter(cfg, clock=(lambda: now[0]) if now else time.monotonic)
    for name in replicas:
        r.register(name, events=True)
    return r


# -- the registry and the protocol ----------------------------------------------------------------------------------


def test_the_registry_has_one_class_per_configurable_policy_each_behind_the_protocol():
    spec_names = typing.get_args(RouterSpec.model_fields["policy"].annotation)
    assert NAMES == spec_names == typing.get_args(PolicyName)
    for name, cls in POLICIES.items():
        policy = make_policy(name)
        assert isinstance(policy, RoutingPolicy) and type(policy) is cls and policy.name == name
        assert make_policy(name) is not policy  # a fresh instance each time
    assert (KvPolicy.uses_events, ApproxPolicy.uses_events, LeastLoadedPolicy.uses_events) == (True, False, False)
    assert [POLICIES[n].learns for n in NAMES] == [True, True, False, False]
    assert not RoundRobinPolicy.uses_sessions and all(POLICIES[n].uses_sessions for n in BY_COST)
    with pytest.raises(ValueError, match="unknown routing policy 'nope'"):
        make_policy("nope")
    with pytest.raises(ValueError):
        router("nope")


_hash_lists = st.lists(st.integers(0, 7), min_size=0, max_size=6)


@settings(max_examples=120, deadline=None)
@given(
    reported=st.dictionaries(st.sampled_from("abc"), _hash_lists, max_size=3),
    learned=st.dictionaries(st.sampled_from("abc"), _hash_lists, max_size=3),
    prompt=_hash_lists,
)
def test_each_policy_reads_the_indexes_it_trusts(reported, learned, prompt):
    """kv: the larger of the event index's and the learned index's overlap per replica; approx: the learned one
    only; least_loaded and round_robin: none (and they never look)."""
    events, approx = PrefixIndex(), ApproxIndex(clock=lambda: 0.0)
    for r in "abc":
        events.add_replica(r)
        approx.add_replica(r)
    for r, hashes in reported.items():
        events.add(r, hashes)
    for r, hashes in learned.items():
        approx.learn(r, hashes)
    indexes = PrefixIndexes(reported=events, learned=approx)
    from_events, from_learned = events.overlaps(prompt), approx.overlaps(prompt)
    merged = {r: max(from_events.get(r, 0), from_learned.get(r, 0)) for r in "abc"}
    assert KvPolicy().overlaps(indexes, prompt) == {r: n for r, n in merged.items() if n}
    assert ApproxPolicy().overlaps(indexes, prompt) == from_learned
    assert LeastLoadedPolicy().overlaps(indexes, prompt) == {}
    assert RoundRobinPolicy().overlaps(indexes, prompt) == {}


_loads = st.builds(ReplicaLoad, in_flight=st.integers(0, 6), prefill_tokens=st.integers(0, 400),
                   active_blocks=st.floats(0, 200, allow_nan=False))  # fmt: skip
_candidates = st.lists(
    st.builds(Candidate, replica=st.sampled_from("abcdef"), overlap_blocks=st.integers(0, 20), load=_loads,
              index_blocks=st.integers(0, 50), resident_sessions=st.integers(0, 4)),  # fmt: skip
    min_size=1, max_size=6, unique_by=lambda c: c.replica,
)


@settings(max_examples=200, deadline=None)
@given(cands=_candidates, prompt_tokens=st.integers(0, 200), max_in_flight=st.sampled_from([None, 1, 3, 6]),
       seed=st.integers(0, 1000))  # fmt: skip
def test_cost_policies_pick_a_cheapest_open_replica_or_none_when_all_are_saturated(cands, prompt_tokens, max_in_flight,
                                                                                    seed):  # fmt: skip
    cfg = CostConfig(block_size=BS, overlap_weight=8, max_in_flight=max_in_flight)
    new_blocks = (prompt_tokens + 8) / BS
    placement = Placement(tuple(cands), prompt_tokens, new_blocks)
    open_ = [c for c in cands if not saturated(c.load, cfg)]
    for name in BY_COST:
        choice = make_policy(name).pick(placement, cfg, random.Random(seed))
        if not open_:
            assert choice is None
            continue
        assert choice is not None and choice.replica in {c.replica for c in open_}
        # least_loaded is prefix-blind: it prices every candidate as if nothing were cached.
        blind = name == "least_loaded"
        priced = {c.replica: cost(Candidate(c.replica, 0 if blind else c.overlap_blocks, c.load), prompt_tokens,
                                  new_blocks, cfg) for c in open_}  # fmt: skip
        assert priced[choice.replica] == min(priced.values())
        chosen = next(c for c in cands if c.replica == choice.replica)
        assert choice.overlap_blocks == (0 if blind else chosen.overlap_blocks)
        if blind:
            assert choice.reason in ("only_replica", "least_loaded")


@settings(max_examples=100, deadline=None)
@given(cands=_candidates, rounds=st.integers(1, 4))
def test_round_robin_gives_every_replica_its_turn_whatever_its_load(cands, rounds):
    policy, cfg = RoundRobinPolicy(), CostConfig(block_size=BS, max_in_flight=1)
    placement = Placement(tuple(cands), 64, 20.0)
    picks = [policy.pick(placement, cfg, random.Random(0)) for _ in range(rounds * len(cands))]
    assert all(p is not None and p.overlap_blocks == 0 for p in picks)  # saturation is no reason to wait
    assert sorted(p.replica for p in picks) == sorted(c.replica for c in cands for _ in range(rounds))


# -- inside KvRouter ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", NAMES)
def test_no_replica_means_no_pin(policy):
    r = KvRouter(RouterConfig(cost=CostConfig(block_size=BS), policy=policy))
    assert r.try_route(route_req(0, [1])).replica_id is None


@pytest.mark.parametrize("policy", ["least_loaded", "round_robin"])
def test_spreads_load_and_releases(policy):
    r = router(policy)
    picks = [r.try_route(route_req(i, [1, 2])).replica_id for i in range(4)]
    assert sorted(picks) == ["a", "a", "b", "b"]
    r.release("r0")
    r.release("r2")
    assert r.in_flight == 2
    r.release("r0")  # releasing twice is harmless
    assert r.in_flight == 2 and sum(r.load(x).in_flight for x in "ab") == 2


def test_least_loaded_wins():
    r = router("least_loaded")
    for i in range(3):
        r.try_route(route_req(i, [i, i + 1]))
    busy = max("ab", key=lambda x: r.load(x).in_flight)
    idle = min("ab", key=lambda x: r.load(x).in_flight)
    assert busy != idle
    assert r.try_route(route_req(9, [9, 9])).replica_id == idle


@pytest.mark.parametrize("policy", NAMES)
def test_silent_replica_expires(policy):
    now = [0.0]
    r = router(policy, now=now)
    now[0] = 5
    r.heartbeat("b")
    now[0] = 12
    assert r.try_route(route_req(0, [1])).replica_id == "b"
    assert r.replicas() == ["b"]


@pytest.mark.parametrize("policy", NAMES)
def test_only_policies_that_learn_fill_the_learned_index(policy):
    r = router(policy)
    prompt = [11, 22, 33, 44]
    first = r.try_route(route_req(0, prompt)).replica_id
    r.release("r0")
    learned = r.snapshot()[first].learned_blocks
    if POLICIES[policy].learns:
        assert learned == 4 and r.overlaps(prompt) == {first: 4}
        again = r.try_route(route_req(1, prompt))
        assert (again.replica_id, again.overlap_blocks, again.reason) == (first, 4, "prefix")
    else:
        assert learned == 0 and r.overlaps(prompt) == {}


@pytest.mark.parametrize("policy", NAMES)
def test_a_session_follows_its_home_only_under_policies_that_use_sessions(policy):
    r = router(policy)
    homes = set()
    for i in range(4):
        homes.add(r.try_route(route_req(i, [100 + i], session="s")).replica_id)
        r.release(f"r{i}")
    assert len(homes) == (1 if POLICIES[policy].uses_sessions else 2)


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(NAMES), st.lists(st.integers(0, 5), min_size=1, max_size=5), st.booleans()),
        min_size=1, max_size=30,
    )
)
def test_switching_policy_in_place_keeps_leases_and_routes_only_to_known_replicas(steps):
    """Benchmarks interleave policies on the same engines (Router.set_policy): whatever the order, every decision
    names a registered replica and the router's leases add up."""
    r = router("kv", "abc")
    live: list[str] = []
    for i, (name, hashes, release) in enumerate(steps):
        r.set_policy(name)
        assert r.policy.name == name == r.cfg.policy
        d = r.try_route(route_req(i, hashes))
        assert d is not None and d.replica_id in "abc"
        live.append(f"r{i}")
        if release:
            r.release(live.pop(0))
        assert r.in_flight == len(live) == sum(r.load(x).in_flight for x in "abc")


def test_a_policy_switched_back_keeps_its_state():
    r = router("round_robin", "abc")
    first = [r.try_route(route_req(i, [i])).replica_id for i in range(2)]
    r.set_policy("kv")
    r.try_route(route_req(5, [5]))
    r.set_policy("round_robin")
    assert first + [r.try_route(route_req(9, [9])).replica_id] == ["b", "c", "a"]  # the turn went on


def test_the_simulators_unvalidated_route_requests_route():
    """The offline simulator builds its RouteRequests with model_construct (router_sim.Ours): every policy places
    them."""
    for name in NAMES:
        r = router(name)
        pre = RouteRequest.model_construct(request_id="p", model="m", block_hashes=[7], prompt_tokens=4,
                                           max_tokens=4, hints=AgentHints(), session_key="")  # fmt: skip
        assert r.try_route(pre).replica_id in ("a", "b")
