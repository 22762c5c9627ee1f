"""Faults through the real graph (2 scripted engine replicas): nothing admitted is lost silently.

- a client that goes away aborts its engine request at once, mid-stream and mid-prefill, in every API;
- an engine replica killed mid-stream ends each affected stream with its API's error event, and new
  requests avoid it;
- a dead preprocessor or router is a clean 503/529 (or the request succeeds after Serve restarts it);
- a redeploy drains in-flight streams.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Iterator

import httpx
import pytest
import ray
from ray import serve

from agentserve.protocol.cluster import RouterStats
from tests.support.graph import running_graph, suite_args
from tests.integration import graph_probe
from agentserve.bench.graph import wait_for
from tests.integration.conftest import RULES, sse_events

pytestmark = pytest.mark.integration

APP = "agentserve"
SYSTEM = "You are a careful agent. " * 40  # a shared prefix: the KV router keeps these streams together
ARGS: dict[str, Any] = {
    "engine": {"kind": "scripted", "block_size": 16, "rules": RULES, "num_replicas": 2,
               "cache": {"prefill_ms_per_token": 2.0}},  # a 2,000-token prompt prefills for 4 s
    "model": {"aliases": ["smollm2", "claude-smollm2"]},
    "keepalive_interval_s": 0.5,
}


@pytest.fixture(scope="module")
def url(model_path) -> Iterator[str]:
    with running_graph(ARGS, name=APP) as u:
        wait_for(lambda: len(router_stats().replicas) == 2, timeout=120)
        yield u


def router_stats() -> RouterStats:
    return graph_probe.router_stats(APP)


def engine_active() -> int:
    return graph_probe.engine_active(APP)


def request(api: str, content: str, *, stream: bool = True, system: str = SYSTEM) -> tuple[str, dict]:
    if api == "anthropic":
        return "/v1/messages", {"model": "claude-smollm2", "max_tokens": 2000, "stream": stream, "system": system,
                                "messages": [{"role": "user", "content": content}]}
    if api == "responses":
        return "/v1/responses", {"model": "smollm2", "stream": stream, "instructions": system, "input": content,
                                 "store": False}
    return "/v1/chat/completions", {"model": "smollm2", "stream": stream,
                                    "messages": [{"role": "system", "content": system}, {"role": "user", "content": content}]}


APIS = ["anthropic", "responses", "chat"]


# -- client disconnects -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("api", APIS)
def test_disconnect_mid_stream_aborts_the_engine_request(url, api):
    path, body = request(api, f"slow {api} disconnect")
    with httpx.Client(base_url=url, timeout=60) as c:
        with c.stream("POST", path, json=body) as r:
            assert r.status_code == 200
            seen = []
            lines = r.iter_lines()  # held: a dropped iterator closes the response (that *is* a disconnect)
            for line in lines:
                seen.append(line)
                if "tick" in line:
                    break
            assert "tick" in seen[-1], seen[-6:]
            assert engine_active() >= 1
        closed = time.monotonic()
    wait_for(lambda: engine_active() == 0, timeout=10)
    assert time.monotonic() - closed < 10  # the rest of the 10 s stream was not generated


@pytest.mark.parametrize("api", ["anthropic", "chat"])
def test_disconnect_during_prefill_aborts_the_engine_request(url, api):
    long_prompt = f"slow prefill {api} " + " ".join(f"w{i}" for i in range(1000))  # ~3,900 tokens: ~8 s of prefill
    path, body = request(api, long_prompt, system="short")
    wait_for(lambda: engine_active() == 0)

    async def go() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            task = asyncio.create_task(c.post(path, json=body))
            await asyncio.sleep(0)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and await asyncio.to_thread(engine_active) == 0:
                assert not task.done(), task.result().text
                await asyncio.sleep(0.05)
            assert await asyncio.to_thread(engine_active) == 1 and not task.done()
            await asyncio.sleep(0.5)
            task.cancel()  # mid-prefill: no token has been generated yet
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(go())
    gone = time.monotonic()
    wait_for(lambda: engine_active() == 0, timeout=10, every=0.05)
    assert time.monotonic() - gone < 3.5, "the prefill ran to completion after the client left"


# -- an engine replica dies mid-stream ------------------------------------------------------------------------------
def _outcome(api: str, raw_lines: list[str]) -> str:
    events = sse_events(raw_lines)
    names = [e for e, _ in events]
    datas = [json.loads(d) for _, d in events if d and d != "[DONE]"]
    if api == "anthropic":
        if "message_stop" in names:
            return "completed"
        assert names[-1] == "error", names[-5:]
        assert datas[-1]["error"]["type"] == "overloaded_error", datas[-1]
        return "error"
    if api == "responses":
        if names[-1] == "response.completed":
            return "completed"
        assert names[-1] == "response.failed", names[-5:]
        assert datas[-1]["response"]["status"] == "failed" and datas[-1]["response"]["error"]["message"]
        return "error"
    if any("error" in d for d in datas):
        err = next(d for d in datas if "error" in d)["error"]
        assert err["type"] == "server_error" and err["message"], err
        return "error"
    assert datas[-1]["choices"][0]["finish_reason"] is not None and raw_lines[-1].strip() in ("data: [DONE]", "")
    return "completed"


def test_killed_replica_ends_its_streams_with_api_errors_and_traffic_moves_on(url):
    results: dict[str, list[str]] = {}

    async def stream(c: httpx.AsyncClient, api: str) -> None:
        path, body = request(api, f"slow {api} crash")
        lines: list[str] = []
        async with c.stream("POST", path, json=body) as r:
            assert r.status_code == 200, await r.aread()
            async for line in r.aiter_lines():
                lines.append(line)
        results[api] = lines

    async def go() -> tuple[str, int]:
        async with httpx.AsyncClient(base_url=url, timeout=90) as c:
            tasks = [asyncio.create_task(stream(c, api)) for api in APIS]
            victim = None
            for _ in range(300):
                replicas = (await asyncio.to_thread(router_stats)).replicas
                busy = {r: v.in_flight for r, v in replicas.items()}
                if sum(busy.values()) >= 3:
                    victim = max(busy, key=busy.get)
                    break
                await asyncio.sleep(0.1)
            assert victim is not None, "streams never routed"
            await asyncio.sleep(0.5)  # mid-stream
            actor = next(a for a in ray.util.list_named_actors(all_namespaces=True)
                         if victim in a["name"] and "Engine" in a["name"])
            ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)  # nothing hangs
            return victim, busy[victim]

    victim, on_victim = asyncio.run(go())
    outcomes = {api: _outcome(api, lines) for api, lines in results.items()}
    # Each stream the killed replica carried ends with its API's error; the others complete (new sessions are spread
    # over the replicas, so the three need not share one).
    assert list(outcomes.values()).count("error") == on_victim, (outcomes, on_victim)
    assert list(outcomes.values()).count("completed") == 3 - on_victim, outcomes
    wait_for(lambda: victim not in router_stats().replicas, timeout=30)
    # New requests avoid the dead replica (before and after Serve replaces it).
    with httpx.Client(base_url=url, timeout=60) as c:
        for i in range(4):
            path, body = request(APIS[i % 3], f"after crash {i}", stream=False)
            r = c.post(path, json=body)
            assert r.status_code == 200, r.text
    wait_for(lambda: len(router_stats().replicas) == 2, timeout=120)


# -- preprocessor / router failures ------------------------------------------------------------------------------------
def _kill(deployment: str) -> None:
    for a in ray.util.list_named_actors(all_namespaces=True):
        if f"#{deployment}#" in a["name"]:
            ray.kill(ray.get_actor(a["name"], namespace=a["namespace"]), no_restart=True)


@pytest.mark.parametrize("deployment", ["Preprocessor", "Router"])
def test_dead_preprocessor_or_router_is_a_clean_retryable_error(url, deployment):
    _kill(deployment)
    statuses: list[int] = []
    with httpx.Client(base_url=url, timeout=60) as c:
        deadline = time.monotonic() + 120
        ok = 0
        while time.monotonic() < deadline and ok < 3:
            for api in APIS:
                path, body = request(api, "hello after a failure", stream=False)
                r = c.post(path, json=body, headers={"anthropic-version": "2023-06-01"})
                statuses.append(r.status_code)
                if r.status_code == 200:
                    ok += 1
                    continue
                assert r.status_code == (529 if api == "anthropic" else 503), (api, r.status_code, r.text)
                assert r.headers["x-should-retry"] == "true" and int(r.headers["retry-after"]) >= 1
                err = r.json()
                assert (err["error"]["type"] == "overloaded_error") if api == "anthropic" else (err["error"]["type"] == "server_error")
            time.sleep(0.2)
    assert ok >= 3, statuses  # Serve restarted it and traffic flows again
    wait_for(lambda: len(router_stats().replicas) == 2, timeout=60)


# -- graceful drain on redeploy ------------------------------------------------------------------------------------------
def test_redeploy_drains_in_flight_streams(url):
    from agentserve.serve.app import build_app

    path, body = request("chat", "slow drain", system="drain")
    body["max_tokens"] = 120  # about 3 s at 25 ms per token
    got: dict[str, Any] = {}

    def consume() -> None:
        with httpx.Client(base_url=url, timeout=120) as c, c.stream("POST", path, json=body) as r:
            got["status"] = r.status_code
            got["lines"] = list(r.iter_lines())

    t = threading.Thread(target=consume)
    t.start()
    wait_for(lambda: engine_active() >= 1, timeout=30)
    # suite_args: the warm start off, as in the first deploy (on, each new engine would prefill this module's
    # sessions before joining: ~16 s of scripted prefill each, not what this test is about)
    serve.run(build_app(suite_args({**ARGS, "keepalive_interval_s": 0.6})), name=APP, route_prefix="/", blocking=False)
    t.join(timeout=120)
    assert not t.is_alive()
    lines = [ln for ln in got["lines"] if ln.startswith("data:")]
    assert got["status"] == 200 and lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][5:])["choices"][0]["finish_reason"] == "length"
