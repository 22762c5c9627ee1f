"""Cost policy, load accounting, admission and replica membership of KvRouter (no Ray)."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.kv_events.format import BlockStored
from agentserve.preprocess.block_hash import block_hashes
from agentserve.protocol import AgentHints, PreprocessedRequest, SamplingParams
from agentserve.protocol.errors import RequestError
from agentserve.routing.cost import CostConfig
from agentserve.routing.kv_router import KvRouter, RouterConfig

BS = 4


def req(i, tokens, session=None, priority=0, osl=None) -> PreprocessedRequest:
    return PreprocessedRequest(
        request_id=f"r{i}", model="m", token_ids=tokens, block_hashes=block_hashes(tokens, BS),
        sampling=SamplingParams(), max_tokens=16, hints=AgentHints(session_id=session, priority=priority, osl=osl),
    )


def make(mode="kv", now=None, **cost) -> KvRouter:
    clock = (lambda: now[0]) if now else None
    cfg = RouterConfig(cost=CostConfig(block_size=BS, overlap_weight=8, **cost), mode=mode, max_waiting=2,
                       max_wait_s=0.5, expire_after_s=10)
    r = KvRouter(cfg, clock=clock) if clock else KvRouter(cfg)
    for name in "ab":
        r.register(name, events=mode == "kv")
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


def test_session_affinity_breaks_near_ties():
    r = make(affinity_slack_blocks=50)
    first = r.try_route(req(0, list(range(8)), session="s")).replica_id
    r.release("r0")
    for i in range(1, 5):
        assert r.try_route(req(i, list(range(500 + 8 * i, 508 + 8 * i)), session="s")).replica_id == first
        r.release(f"r{i}")


def test_approx_mode_learns_from_its_own_decisions():
    r = make(mode="approx")
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
