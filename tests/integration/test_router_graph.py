"""The KV-aware router through the real graph: 2 scripted engine replicas publishing real KV events."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import ray
from ray import serve

from agentserve.protocol.cluster import RouterStats
from tests.support.graph import running_graph
from agentserve.bench.graph import wait_for

pytestmark = pytest.mark.integration

RULES = [
    {"match": "slow", "reply": "tick " * 60, "itl_ms": 50},  # ~3 s
    {"match": "", "reply": "Done. Next step?", "itl_ms": 0},
]
SYSTEM = "You are a coding agent. " * 40  # a shared prefix many blocks long


def router():
    return serve.get_deployment_handle("Router", app_name="agentserve")


def stats() -> RouterStats:
    return router().stats.remote().result()


async def astats() -> RouterStats:
    return await router().stats.remote()


@pytest.fixture(scope="module")
def url(model_path):
    args = {
        "engine": {"kind": "scripted", "block_size": 16, "rules": RULES, "num_replicas": 2,
                   "cache": {"capacity_blocks": 4096, "prefill_ms_per_token": 0.05}},
        # Session-aware admission on (its order is unit-tested; here: the config reaches the Router, overflow holds).
        "router": {"max_in_flight_per_replica": 2, "max_waiting": 1, "max_wait_s": 1.0, "retry_after_s": 3,
                   "scheduling": {"session_fairness": True, "interactive_first": True, "wait_for_cache": True}},
    }
    with running_graph(args) as u:
        wait_for(lambda: len(stats().replicas) == 2, timeout=60)
        yield u


def chat(url, messages, **kw):
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "smollm2", "messages": messages, **kw},
                      timeout=60)


def test_sessions_stick_to_the_replica_holding_their_prefix(url):
    for s in range(4):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"session {s} task"}]
        previous = 0
        for turn in range(3):
            r = chat(url, messages, user=f"s{s}")
            assert r.status_code == 200, r.text
            usage = r.json()["usage"]
            if turn > 0:  # the previous turn's full prompt blocks are cached: same replica
                assert usage["prompt_tokens_details"]["cached_tokens"] >= (previous // 16) * 16 - 16
            previous = usage["prompt_tokens"]
            messages += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                         {"role": "user", "content": f"tool output {turn} " * 20}]
    st = stats()
    assert st.events["batches"] > 0 and st.events["resets"] == 0
    # Every later turn found its session's prefix where the earlier turn left it.
    assert max(v.indexed_blocks for v in st.replicas.values()) > 0
    assert st.counters["prefix"] >= 8


async def _slow(client, url, i):
    return await client.post(f"{url}/v1/chat/completions", json={
        "model": "smollm2", "messages": [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": f"slow job {i}"}]})


def test_load_spreads_then_admission_sheds_with_retry_after(url):
    async def run():
        async with httpx.AsyncClient(timeout=60) as client:
            tasks = [asyncio.create_task(_slow(client, url, i)) for i in range(4)]
            busy: dict = {}
            for _ in range(100):  # until all four are routed (preprocessing is slow on a busy machine)
                busy = {r: v.in_flight for r, v in (await astats()).replicas.items()}
                if sum(busy.values()) == 4:
                    break
                await asyncio.sleep(0.1)
            extra = [asyncio.create_task(_slow(client, url, 10 + i)) for i in range(2)]
            done = await asyncio.gather(*tasks, *extra)
            return busy, done

    started = time.time()
    busy, done = asyncio.run(run())
    # Same system prompt everywhere, yet with 2 in flight per replica allowed, both replicas took 2.
    assert sorted(busy.values()) == [2, 2]
    codes = sorted(r.status_code for r in done)
    assert codes == [200, 200, 200, 200, 503, 503], codes
    for r in done:
        if r.status_code == 503:
            assert r.headers["retry-after"] == "3"
            assert r.json()["error"]["code"] == "overloaded"
    assert time.time() - started < 30  # nothing hung


async def _overflowing_stream(client, url, i):
    """A streaming Messages request at saturation: (status, headers, every byte it got)."""
    body = {"model": "smollm2", "max_tokens": 32, "stream": True, "messages": [{"role": "user", "content": f"x {i}"}]}
    async with client.stream("POST", f"{url}/v1/messages", json=body,
                             headers={"anthropic-version": "2023-06-01"}) as r:
        return r.status_code, r.headers, await r.aread()


def test_overflow_is_a_529_with_retry_after_before_any_stream_byte(url):
    async def run():
        async with httpx.AsyncClient(timeout=60) as client:
            tasks = [asyncio.create_task(_slow(client, url, 20 + i)) for i in range(4)]
            for _ in range(100):
                if sum(v.in_flight for v in (await astats()).replicas.values()) == 4:
                    break
                await asyncio.sleep(0.1)
            t0 = time.monotonic()
            over = await asyncio.gather(*[_overflowing_stream(client, url, i) for i in range(2)])
            waited = time.monotonic() - t0
            await asyncio.gather(*tasks)
            return over, waited

    over, waited = asyncio.run(run())
    for status, headers, raw in over:
        # One waited max_wait_s (1 s) in the queue, one found it full: both refused before the stream opened.
        assert status == 529, raw
        assert headers["retry-after"] == "3" and headers["content-type"].startswith("application/json")
        assert b"event:" not in raw and b'"overloaded_error"' in raw
    assert waited < 10  # never a stalled queue


def test_killed_replica_fails_its_request_loudly_and_leaves_the_index(url):
    async def run():
        async with httpx.AsyncClient(timeout=60) as client:
            task = asyncio.create_task(_slow(client, url, 99))
            victim = None
            while victim is None:
                await asyncio.sleep(0.1)
                victim = next((r for r, v in (await astats()).replicas.items() if v.in_flight > 0), None)
            actor = next(a for a in ray.util.list_named_actors(all_namespaces=True)
                         if victim in a["name"] and "Engine" in a["name"])
            ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
            return victim, await task

    victim, resp = asyncio.run(run())
    # The client learns: a non-streaming request that lost its engine is an error, not an empty 200.
    assert resp.status_code >= 500, resp.text
    wait_for(lambda: victim not in stats().replicas, timeout=30)
    # Serve replaces the replica; the new one joins the index and traffic flows again.
    wait_for(lambda: len(stats().replicas) == 2, timeout=90)
    r = chat(url, [{"role": "user", "content": "after the crash"}])
    assert r.status_code == 200
