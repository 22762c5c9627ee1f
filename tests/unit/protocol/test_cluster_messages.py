"""The typed messages between deployments (agentserve/protocol/cluster.py): each survives the plain pickle Ray
handles use (serve/handles.py), and the Router deployment speaks them (its class driven without Ray)."""

from __future__ import annotations

import asyncio
import json
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.config import LoraAdapterSpec, ServeArgs
from agentserve.protocol import RouteRequest
from agentserve.protocol.cluster import (
    AdapterLoadResult,
    EngineReplicaStats,
    ModelAdapters,
    ModelRouterStats,
    ReplicaRegistration,
    ReplicaStats,
    RouterStats,
)
from agentserve.serve.deployments.router import RouterReplica

_ids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_specs = st.builds(LoraAdapterSpec, id=_ids, path=_ids, aliases=st.tuples(_ids) | st.just(()))
_counts = st.integers(0, 1 << 40)
_counters = st.dictionaries(_ids, _counts, max_size=4)
_replica_stats = st.builds(ReplicaStats, in_flight=_counts, prefill_tokens=_counts,
                           active_blocks=st.floats(0, 1e9, allow_nan=False), indexed_blocks=_counts,
                           learned_blocks=_counts, model=_ids)  # fmt: skip
_messages = st.one_of(
    st.builds(ReplicaRegistration, model=_ids, kv_endpoint=st.none() | _ids, replay_endpoint=st.none() | _ids,
              adapters=st.lists(_specs, max_size=3).map(tuple)),  # fmt: skip
    st.builds(ModelAdapters, model=_ids, adapters=st.lists(_specs, max_size=3).map(tuple)),
    st.builds(AdapterLoadResult, replica_id=_ids, model=_ids, adapters=st.lists(_ids, max_size=3).map(tuple),
              loaded=st.none() | st.booleans(), error=st.none() | _ids),  # fmt: skip
    st.builds(EngineReplicaStats, replica_id=_ids, model=_ids, active=_counts, started=_counts, aborted=_counts,
              cached_blocks=_counts),  # fmt: skip
    _replica_stats,
    st.builds(RouterStats, replicas=st.dictionaries(_ids, _replica_stats, max_size=3), in_flight=_counts,
              waiting=_counts, rejected=_counts, counters=_counters, calls=_counters, events=_counters,
              models=st.dictionaries(_ids, st.builds(ModelRouterStats, replicas=st.lists(_ids).map(tuple),
                                                     in_flight=_counts, waiting=_counts, rejected=_counts,
                                                     counters=_counters), max_size=2)),  # fmt: skip
)


@settings(max_examples=200, deadline=None)
@given(_messages)
def test_every_message_survives_plain_pickle_unchanged(message):
    for protocol in (pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL):
        again = pickle.loads(pickle.dumps(message, protocol=protocol))
        assert type(again) is type(message) and again == message


def _router(policy: str = "approx") -> RouterReplica:
    args = ServeArgs.model_validate({"router": {"policy": policy}, "models": [{"id": "m/a", "aliases": []}, {"id": "m/b", "aliases": []}]})
    return RouterReplica.func_or_class(args.model_dump(mode="json"), args.resolve_catalog().model_dump(mode="json"))


def test_the_router_learns_registrations_and_answers_adapters_in_one_shape():
    async def go():
        router = _router()
        held = LoraAdapterSpec(id="pirate", path="/p", aliases=("arr",))
        await router.register("e1", ReplicaRegistration(model="m/a", adapters=(held,)))
        await router.register("e2", ReplicaRegistration(model="m/b"))
        await router.claim_adapter("m/b", LoraAdapterSpec(id="scribe", path="/s"))
        assert await router.adapters() == (ModelAdapters("m/a", (held,)),)  # committed ones, every model with some
        assert await router.adapters("m/b") == (ModelAdapters("m/b", ()),)
        assert await router.adapters("m/b", True) == (ModelAdapters("m/b", (LoraAdapterSpec(id="scribe", path="/s"),)),)
        await router.commit_adapter("m/b", "scribe")
        assert [e.model for e in await router.adapters()] == ["m/a", "m/b"]
        assert await router.replicas("m/a") == {"e1": 0} and await router.replicas() == {"e1": 0, "e2": 0}
        decision = await router.route(RouteRequest(request_id="r1", model="m/b", block_hashes=[1, 2],
                                                   prompt_tokens=32, max_tokens=8))  # fmt: skip
        assert decision.replica_id == "e2"
        return await router.stats()

    stats = asyncio.run(go())
    assert isinstance(stats, RouterStats) and stats.in_flight == 1 and stats.events == {}
    # (32 prompt + 8 output tokens) in 128-token blocks, rounded; the two block hashes learned (approx).
    assert stats.replicas["e2"] == ReplicaStats(in_flight=1, prefill_tokens=32, active_blocks=0.31, indexed_blocks=0,
                                                learned_blocks=2, model="m/b")  # fmt: skip
    assert stats.models["m/b"] == ModelRouterStats(("e2",), 1, 0, 0, stats.models["m/b"].counters)
    assert stats.models["m/b"].counters["routed"] == 1 and stats.counters["routed"] == 1
    assert stats.calls == {"route": 1}


def test_router_stats_as_plain_data_keep_the_shape_benchmark_records_had():
    async def go():
        router = _router()
        await router.register("e1", ReplicaRegistration(model="m/a"))
        return await router.stats()

    data = (asyncio.run(go())).as_dict()
    assert list(data) == ["replicas", "in_flight", "waiting", "rejected", "counters", "calls", "events", "models",
                          "router_id"]  # the Router replica that answered: added last, the records before keep theirs
    assert list(data["replicas"]["e1"]) == ["in_flight", "prefill_tokens", "active_blocks", "indexed_blocks",
                                            "learned_blocks", "model"]  # fmt: skip
    assert data["replicas"]["e1"]["model"] == "m/a"
    assert list(data["models"]["m/a"]) == ["replicas", "in_flight", "waiting", "rejected", "counters"]
    assert json.loads(json.dumps(data))["models"]["m/a"]["replicas"] == ["e1"]


def test_set_policy_switches_every_models_router_in_place():
    async def go():
        router = _router("kv")
        try:
            await router.register("e1", ReplicaRegistration(model="m/a"))
            await router.set_policy("round_robin")
            assert {r.policy.name for r in router._router.routers.values()} == {"round_robin"}  # noqa: SLF001
            await router.set_policy("kv")
            assert {r.policy.name for r in router._router.routers.values()} == {"kv"}  # noqa: SLF001
        finally:
            router._subscriber.close()  # noqa: SLF001

    asyncio.run(go())
