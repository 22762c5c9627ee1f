"""Two Router replicas through the real graph (2 scripted engine replicas publishing real KV events): each holds the
whole prefix index, and killing one under load loses no stream, answers no request with a 5xx, leaks no lease, and
keeps sessions on the replica holding their prefix."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import ray
from ray import serve

from agentserve.bench.graph import wait_for
from agentserve.protocol.cluster import RouterStats, RouterTarget
from tests.support.graph import running_graph

pytestmark = pytest.mark.integration

SLOW = "tick " * 40
RULES = [
    {"match": "slow", "reply": SLOW, "itl_ms": 50},  # ~2 s
    {"match": "", "reply": "Done. Next step?", "itl_ms": 0},
]
SYSTEM = "You are a coding agent. " * 40  # a shared prefix many blocks long
BLOCK = 16


def routers() -> dict[str, str]:
    """Running Router replicas: unique id -> actor name."""
    out = {}
    for a in ray.util.list_named_actors(all_namespaces=True):
        if "#Router#" in a["name"]:
            try:
                ray.get_actor(a["name"], namespace=a["namespace"])
            except ValueError:
                continue
            out[a["name"].rsplit("#", 1)[-1]] = a["name"]
    return out


def stats_of(router_id: str) -> RouterStats:
    """That Router replica's stats (this process's handle may not know a new replica yet: asked until it does)."""
    handle = serve.get_deployment_handle("Router", app_name="agentserve")
    deadline = time.monotonic() + 30
    while True:
        st = handle.stats.remote(RouterTarget(router_id)).result(timeout_s=10)
        if st.router_id == router_id or time.monotonic() > deadline:
            assert st.router_id == router_id, f"no answer from Router replica {router_id}"
            return st
        time.sleep(0.2)


def every_router_knows_both_engines() -> bool:
    ids = routers()
    return len(ids) == 2 and all(len(stats_of(r).replicas) == 2 for r in ids)


@pytest.fixture(scope="module")
def url(model_path):
    args = {
        "engine": {"kind": "scripted", "block_size": BLOCK, "rules": RULES, "num_replicas": 2,
                   "cache": {"capacity_blocks": 4096, "prefill_ms_per_token": 0.05}},
        "router": {"replicas": 2},
    }
    with running_graph(args) as u:
        wait_for(every_router_knows_both_engines, timeout=90)
        yield u


def chat(url: str, messages: list[dict], **kw) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "smollm2", "messages": messages, **kw},
                      timeout=60)


class Session:
    """A multi-turn session: each turn must reuse the previous turn's prompt blocks (same engine replica)."""

    def __init__(self, url: str, name: str) -> None:
        self.url, self.name = url, name
        self.messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{name} task"}]
        self.previous = 0
        self.reused: list[tuple[int, int]] = []  # (cached, previous prompt) per later turn

    def turn(self) -> httpx.Response:
        r = chat(self.url, self.messages, user=self.name)
        if r.status_code == 200:
            usage = r.json()["usage"]
            if self.previous:
                self.reused.append((usage["prompt_tokens_details"]["cached_tokens"], self.previous))
            self.previous = usage["prompt_tokens"]
            self.messages += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                              {"role": "user", "content": f"tool output {len(self.messages)} " * 20}]
        return r


def test_every_router_holds_every_engine_and_sessions_spread_over_the_routers(url):
    sessions = [Session(url, f"spread-{i}") for i in range(8)]
    for _ in range(2):
        for s in sessions:
            assert s.turn().status_code == 200
    ids = routers()
    per_router = {r: stats_of(r) for r in ids}
    assert all(len(st.replicas) == 2 for st in per_router.values())  # each subscribed to both engines' events
    assert all(st.events.get("batches", 0) > 0 for st in per_router.values())
    assert all(st.counters["routed"] > 0 for st in per_router.values())  # sessions placed by both
    # Each Router hears every engine's signals: its leases end with their requests, none waits to lapse.
    wait_for(lambda: all(stats_of(r).in_flight == 0 for r in ids), timeout=5)
    assert all(st.calls.get("report", 0) > 0 and st.counters["lapsed"] == 0 for st in map(stats_of, ids))
    for s in sessions:
        assert all(cached >= (prev // BLOCK) * BLOCK - BLOCK for cached, prev in s.reused), s.reused


def test_killing_a_router_under_load_loses_no_stream_no_request_and_no_lease(url):
    sessions = [Session(url, f"kill-{i}") for i in range(6)]
    for s in sessions:
        assert s.turn().status_code == 200
    streams: list[dict] = []

    def stream(i: int) -> None:
        out = {"text": "", "finished": False, "status": None}
        streams.append(out)
        body = {"model": "smollm2", "stream": True,
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"slow {i}"}]}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunk = httpx.Response(200, content=line[6:]).json()
                    if chunk.get("choices"):
                        out["text"] += chunk["choices"][0]["delta"].get("content") or ""
                        out["finished"] |= chunk["choices"][0].get("finish_reason") == "stop"

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # the streams are routed and running
    ids = routers()
    victim = sorted(ids)[0]
    assert stats_of(victim).counters["routed"] > 0  # it placed sessions: their next turns find it gone
    ray.kill(ray.get_actor(ids[victim], namespace="serve"), no_restart=True)
    killed_at = time.monotonic()
    statuses = []
    while time.monotonic() - killed_at < 4:  # new turns while the Router is gone and Serve replaces it
        for s in sessions:
            statuses.append(s.turn().status_code)
    for t in threads:
        t.join(timeout=60)

    assert statuses and all(code == 200 for code in statuses), statuses
    assert all(s["status"] == 200 and s["finished"] and s["text"] == SLOW for s in streams), streams
    # Every later turn, through the kill, found its session's prefix where the earlier turn left it.
    for s in sessions:
        assert all(cached >= (prev // BLOCK) * BLOCK - BLOCK for cached, prev in s.reused), (s.name, s.reused)
    # Serve replaces the Router; the new replica relearns both engines from their next heartbeats.
    wait_for(lambda: victim not in routers() and every_router_knows_both_engines(), timeout=60)
    # No lease outlives its request on any Router (the dead one's died with it).
    wait_for(lambda: all(stats_of(r).in_flight == 0 for r in routers()), timeout=30)
