"""Router leases on the real graph (one scripted engine replica, one slot): no exit path leaks a slot.

Each test ends with the router holding no lease and the engine running no request, and a fresh request
admitted at once (a leaked slot would leave it queued until `max_wait_s`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterator

import httpx
import pytest
import ray

from agentserve.protocol.cluster import RouterStats
from tests.support.graph import running_graph
from tests.integration import graph_probe
from agentserve.bench.graph import wait_for
from tests.integration.conftest import RULES

pytestmark = pytest.mark.integration

APP = "agentserve"
ARGS: dict[str, Any] = {
    "engine": {"kind": "scripted", "block_size": 16, "rules": RULES, "cache": {"prefill_ms_per_token": 2.0}},
    "router": {"max_in_flight_per_replica": 1, "max_wait_s": 20, "lease_s": 8.0},
    "model": {"aliases": ["smollm2", "claude-smollm2"]},
}


@pytest.fixture(scope="module")
def url(model_path) -> Iterator[str]:
    with running_graph(ARGS, name=APP) as u:
        wait_for(lambda: len(router_stats().replicas) == 1, timeout=120)
        yield u


def router_stats() -> RouterStats:
    return graph_probe.router_stats(APP)


def engine_active() -> int:
    return graph_probe.engine_active(APP)


def nothing_held() -> bool:
    stats = router_stats()
    return stats.in_flight == 0 and all(v.in_flight == 0 for v in stats.replicas.values()) and engine_active() == 0


def assert_slot_free(url: str, within_s: float = 4.0, *, expect_released: bool = True) -> None:
    """Nothing held (well before a lease could lapse: released, not expired), and a new request is admitted
    at once rather than queued behind a leaked slot."""
    wait_for(nothing_held, timeout=within_s)
    if expect_released:
        assert router_stats().counters["lapsed"] == 0  # every slot was released, none left to expire
    started = time.monotonic()
    r = httpx.post(f"{url}/v1/chat/completions", timeout=30,
                   json={"model": "smollm2", "messages": [{"role": "user", "content": "hello"}]})
    assert r.status_code == 200, r.text
    assert time.monotonic() - started < 5


def chat(content: str, stream: bool = True) -> dict:
    return {"model": "smollm2", "stream": stream, "messages": [{"role": "user", "content": content}]}


def _hold_the_slot(url: str, until: threading.Event) -> threading.Thread:
    """A slow stream that holds the only slot until `until` is set (then the client leaves)."""

    def run() -> None:
        with httpx.Client(base_url=url, timeout=60) as c, c.stream("POST", "/v1/chat/completions", json=chat("slow holder")) as r:
            for _ in r.iter_lines():
                if until.is_set():
                    return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_for(lambda: router_stats().in_flight == 1, timeout=20)
    return t


def test_client_leaving_while_queued_for_admission(url):
    release = threading.Event()
    holder = _hold_the_slot(url, release)

    async def queued_then_gone() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            task = asyncio.create_task(c.post("/v1/chat/completions", json=chat("queued")))
            for _ in range(100):
                if (await asyncio.to_thread(router_stats)).waiting == 1:
                    break
                await asyncio.sleep(0.05)
            assert (await asyncio.to_thread(router_stats)).waiting == 1
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(queued_then_gone())
    wait_for(lambda: router_stats().waiting == 0, timeout=10)
    release.set()
    holder.join(timeout=30)
    assert_slot_free(url)


@pytest.mark.parametrize("stage", ["before the first byte", "mid-prefill", "mid-stream"])
def test_client_leaving_at_each_stage_holds_nothing(url, stage):
    long_prompt = "slow prefill " + " ".join(f"w{i}" for i in range(1000))  # ~8 s of prefill at 2 ms/token

    async def go() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            if stage == "mid-stream":
                async with c.stream("POST", "/v1/chat/completions", json=chat("slow leaver")) as r:
                    async for line in r.aiter_lines():
                        if "tick" in line:
                            break
                return
            task = asyncio.create_task(c.post("/v1/chat/completions", json=chat(long_prompt)))
            if stage == "mid-prefill":
                while await asyncio.to_thread(engine_active) == 0:
                    await asyncio.sleep(0.05)
            else:
                await asyncio.sleep(0.02)  # still in decode / preprocess / admission
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(go())
    assert_slot_free(url)


def test_one_client_request_id_twice_is_two_requests(url):
    """The client's x-request-id is a label: two requests sharing it are counted and aborted separately."""
    lines: dict[int, list[str]] = {0: [], 1: []}
    leave = threading.Event()

    def run(i: int, leave_early: bool) -> None:
        with httpx.Client(base_url=url, timeout=60) as c, c.stream(
            "POST", "/v1/chat/completions", json=chat("slow same id"), headers={"x-request-id": "client-chosen"}
        ) as r:
            for line in r.iter_lines():
                lines[i].append(line)
                if leave_early and leave.is_set():
                    return

    first = threading.Thread(target=run, args=(0, True))
    first.start()
    wait_for(lambda: router_stats().in_flight == 1, timeout=20)
    second = threading.Thread(target=run, args=(1, False))
    second.start()  # queued behind the first: the id does not let it share the first one's slot
    wait_for(lambda: router_stats().waiting == 1, timeout=20)
    leave.set()
    first.join(timeout=30)
    second.join(timeout=60)
    assert lines[1][-1] == "data: [DONE]" or lines[1][-2] == "data: [DONE]"  # the first's abort did not end it
    assert_slot_free(url)


def test_an_ingress_that_dies_mid_stream_leaks_nothing(url):
    """Its engine stream is aborted (the caller is gone) or its lease lapses: either way the slot comes back."""

    def run() -> None:
        try:
            with httpx.Client(base_url=url, timeout=30) as c, c.stream("POST", "/v1/chat/completions", json=chat("slow orphan")) as r:
                for _ in r.iter_lines():
                    pass
        except httpx.HTTPError:
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_for(lambda: engine_active() == 1, timeout=20)
    for a in ray.util.list_named_actors(all_namespaces=True):
        if "#Ingress#" in a["name"]:
            ray.kill(ray.get_actor(a["name"], namespace=a["namespace"]), no_restart=False)
    t.join(timeout=30)
    wait_for(lambda: httpx.get(f"{url}/health", timeout=5).status_code == 200, timeout=60)
    assert_slot_free(url, within_s=ARGS["router"]["lease_s"] + 15, expect_released=False)
