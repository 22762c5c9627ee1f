"""The graph on a cluster of Ray nodes, as KubeRay runs it: a head, a CPU pod and two GPU pods on this machine
(agentserve/deploy/local_cluster.py), the Serve config the KubeRay generator emits, the state on PostgreSQL.

Engine replicas land only on the GPU pods and the rest only on the CPU pod, as the generator's resources say; KV
events, leases and heartbeats cross nodes (the Router on the CPU pod indexes blocks the GPU pods' engines made, and
holds no lease once the streams end); a Responses chain continues on PostgreSQL whichever Ingress replica serves it,
scoped to its key.

An upgrade that rolls every deployment while sessions stream on every node drops no stream and breaks no session
(signed thinking, a stored chain, sealed reasoning). A GPU pod dies mid-stream: its streams end with a retryable
error, the others finish token for token, new requests go to the survivor at once, the Router forgets the dead
replica, and a replacement pod takes traffic. The CPU pod that holds the Router dies: the graph answers again on
another CPU pod, and its sessions go on.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import anthropic
import httpx
import openai
import psycopg
import pytest

from agentserve.bench.graph import wait_for
from agentserve.deploy.local_cluster import (
    APP, LocalCluster, deploy, local_cluster, local_config, local_values, placement,
)
from agentserve.ports import free_port
from tests.integration.conftest import RULES
from tests.integration.graph_probe import engine_active, router_stats
from tests.integration.durable_graph import DURABLE_RULES
from agentserve.deploy.local_postgres import postgres_server
from tests.support.cluster import CLUSTER
from tests.support.keys import signing_key
from tests.support.streams import Stream

pytestmark = [pytest.mark.integration, pytest.mark.restarts_cluster]

TICKS = 80
ENGINE = {"rules": [{"match": "long", "reply": "tick " * TICKS, "itl_ms": 50}, *DURABLE_RULES, *RULES]}  # ~4 s a stream
HELLO = "Hello! How can I help?"
VALUES = local_values(router_replicas=2)
THINKING = {"type": "enabled", "budget_tokens": 1024}


@dataclass
class Graph:
    cluster: LocalCluster
    url: str
    dsn: str
    port: int
    secret_key: str

    def config(self, **runtime_env: str) -> dict[str, Any]:
        """The cluster's Serve config; `runtime_env` variables added to the application's (a change of them is a
        new version of every deployment: Serve rolls them all)."""
        cfg = local_config(VALUES, port=self.port, dsn=self.dsn, engine=ENGINE, secret_key=self.secret_key)
        cfg["applications"][0]["runtime_env"]["env_vars"].update(runtime_env)
        return cfg


@pytest.fixture(scope="module")
def graph(model_path) -> Iterator[Graph]:
    CLUSTER.stop()  # this module runs on a cluster of its own nodes
    with postgres_server() as dsn, local_cluster(VALUES, gpu_pods=2) as c:
        port = free_port()
        g = Graph(c, f"http://127.0.0.1:{port}", dsn, port, signing_key("multi-node"))
        deploy(g.config())
        url = g.url
        wait_for(lambda: _ok(f"{url}/health"), 240, 0.5, what="the graph on the cluster")
        wait_for(lambda: len(router_stats(APP).replicas) == 2, 60, 0.5, what="both engines registered with the Router")
        floor = {"Ingress": VALUES.ingress.min_replicas, "Preprocessor": VALUES.preprocessor.min_replicas}
        wait_for(lambda: all(len(placement()[d]) >= n for d, n in floor.items()), 120, 0.5,
                 what="Ingress and Preprocessor at their minimum replicas")
        yield g


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _oai(graph: Graph, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{graph.url}/v1", api_key=key, max_retries=0, timeout=60)


def test_replicas_land_where_the_generators_resources_put_them(graph):
    nodes = {n.id: n.role for n in graph.cluster.nodes}
    where = placement()
    engines = [nodes[node] for node in where["Engine"].values()]
    assert engines == ["gpu", "gpu"] and len(set(where["Engine"].values())) == 2  # one TP=4 engine per GPU pod
    for name in ("Ingress", "Preprocessor", "Router"):
        assert where[name] and {nodes[node] for node in where[name].values()} == {"cpu"}, (name, where[name])
    assert len(where["Ingress"]) == VALUES.ingress.min_replicas


def test_kv_events_leases_and_a_responses_chain_cross_nodes(graph):
    client = _oai(graph)
    system = "You are a cluster test. " * 200  # a prefix of many blocks
    first = client.responses.create(model="smollm2", instructions=system, input="first question")
    assert first.output_text == HELLO
    chain = [first.id]
    for i in range(5):  # each turn on whichever Ingress replica takes it; the chain is in PostgreSQL
        nxt = client.responses.create(model="smollm2", previous_response_id=chain[-1], input=f"question {i}")
        assert nxt.output_text == HELLO
        chain.append(nxt.id)
    assert client.responses.retrieve(chain[1]).previous_response_id == chain[0]
    with psycopg.connect(graph.dsn) as conn:  # in the database, not in a replica
        (n,) = conn.execute("SELECT COUNT(*) FROM agentserve_responses WHERE id = ANY(%s)", (chain,)).fetchone()
    assert n == len(chain)
    with pytest.raises(openai.NotFoundError):  # and scoped to the caller's key
        _oai(graph, "key-b").responses.retrieve(chain[-1])
    stats = router_stats(APP)
    # The engines on the GPU pods published their blocks; the Router on the CPU pod indexed them.
    assert sum(r.indexed_blocks for r in stats.replicas.values()) > 0, stats
    assert stats.events.get("batches", 0) > 0, stats.events
    # The later turns reused the session's prefix on its engine: routed by the prefix the events told of.
    assert client.responses.create(model="smollm2", previous_response_id=chain[-1], input="again").usage \
        .input_tokens_details.cached_tokens > 0
    wait_for(lambda: router_stats(APP).in_flight == 0, 10, 0.2, what="every lease released")


def _replica_ids() -> dict[str, set[str]]:
    return {name: set(replicas) for name, replicas in placement().items()}


def test_an_upgrade_rolls_every_deployment_on_every_node_with_sessions_live(graph):
    claude = anthropic.Anthropic(base_url=graph.url, api_key="unused", max_retries=0, timeout=60)
    client = _oai(graph)
    # Live sessions: signed thinking (Claude Code), a stored chain (previous_response_id), sealed reasoning (Codex).
    first = [{"role": "user", "content": "DUR_THINK: plan the migration"}]
    signed = claude.messages.create(model="smollm2", max_tokens=2048, thinking=THINKING, messages=first)
    assert signed.content[0].type == "thinking" and signed.content[0].signature
    stored = client.responses.create(model="smollm2", input="rsp-hello", store=True)
    sealed = client.responses.create(model="smollm2", store=False, include=["reasoning.encrypted_content"],
                                     input="rsp-reason-text: what is 2+2?")
    (reasoning,) = [i for i in sealed.output if i.type == "reasoning"]

    before = _replica_ids()
    streams = [Stream(graph.url, f"long upgrade {i}", "anthropic" if i % 2 else "chat") for i in range(6)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(30)
    failures: list[Any] = []
    done = threading.Event()

    def keep_asking() -> None:  # new turns all through the rollout: none may fail
        while not done.is_set():
            try:
                r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}])
                if r.choices[0].message.content != HELLO:
                    failures.append(r.choices[0].message.content)
            except Exception as exc:  # noqa: BLE001 - every failure is reported
                failures.append(repr(exc))
            time.sleep(0.3)

    asker = threading.Thread(target=keep_asking, daemon=True)
    asker.start()
    started = time.monotonic()
    deploy(graph.config(AGENTSERVE_RELEASE="2"))  # a new version of every deployment

    def rolled() -> bool:
        now = _replica_ids()
        return all(now.get(name) and not (now[name] & old) for name, old in before.items())

    wait_for(rolled, 240, 1.0, what="every deployment replaced")
    wait_for(lambda: serve_status() == "RUNNING", 60, 0.5, what="the app RUNNING")
    print(f"[upgrade +{time.monotonic() - started:.1f}s] every deployment replaced")
    for s in streams:
        s.join(60)
    done.set()
    asker.join(30)
    for s in streams:  # in flight when the rollout began: finished on the replicas that drained
        assert s.finished and s.text == "tick " * TICKS and s.error is None, (s.prompt, s.finished, s.error)
    assert failures == []

    # Every session goes on on the new replicas: the key, the store and the sealing are the cluster's, not a process's.
    nxt = claude.messages.create(model="smollm2", max_tokens=2048, thinking=THINKING, messages=[
        *first, {"role": "assistant", "content": [b.model_dump() for b in signed.content]},
        {"role": "user", "content": "DUR_NEXT: go on"}])
    assert nxt.content[-1].text == "Continuing where we left off."
    assert client.responses.create(model="smollm2", previous_response_id=stored.id, input="rsp-hello again") \
        .previous_response_id == stored.id
    replay = [{"role": "user", "content": "rsp-reason-text: what is 2+2?"},
              {"type": "reasoning", "summary": [], "encrypted_content": reasoning.encrypted_content},
              {"role": "user", "content": "rsp-hello: and 3+3?"}]
    assert client.responses.create(model="smollm2", store=False, input=replay).output_text == "Hello from responses."
    wait_for(lambda: router_stats(APP).in_flight == 0, 10, 0.2, what="every lease released")


def serve_status() -> str:
    from ray import serve

    return serve.status().applications[APP].status


def test_a_gpu_pod_dies_mid_stream(graph):
    engines = placement()["Engine"]  # replica -> node
    streams = [Stream(graph.url, f"long stream {i}", "anthropic" if i % 2 else "chat") for i in range(8)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(30)
    in_flight = router_stats(APP).replicas
    assert all(in_flight[r].in_flight > 0 for r in engines), in_flight  # both pods stream
    victim_replica, victim_node = next(iter(engines.items()))
    survivor = next(r for r in engines if r != victim_replica)
    victim = next(n for n in graph.cluster.nodes if n.id == victim_node)
    killed_at = time.monotonic()
    graph.cluster.kill(victim)

    for s in streams:
        s.join(60)
    print(f"[kill +{time.monotonic() - killed_at:.1f}s] every stream ended")  # figures for the failure report
    broken = [s for s in streams if not s.finished]
    intact = [s for s in streams if s.finished]
    assert broken and intact, [(s.prompt, s.finished, s.error) for s in streams]
    for s in intact:
        assert s.text == "tick " * TICKS and s.error is None, (s.prompt, len(s.text), s.error)
    print([(s.api, round(s.ended_at - killed_at, 2), s.error) for s in broken])
    # Each broken stream ended at once with its API's retryable error, in the stream (a harness retries the turn):
    # not a hang, not a cut connection.
    retryable = {"chat": {"server_error"}, "anthropic": {"api_error", "overloaded_error"}}
    for s in broken:
        assert s.status == 200 and s.error is not None and "transport" not in s.error, (s.prompt, s.error)
        assert s.error["type"] in retryable[s.api], (s.api, s.error)
        assert "retry" in s.error["message"] and "Error" not in s.error["message"], s.error  # no class names
        assert s.ended_at - killed_at < 10, (s.prompt, s.ended_at - killed_at)

    # New requests go to the survivor at once, and the Router forgets the dead replica.
    client = _oai(graph)
    for i in range(3):
        assert client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": f"hi {i}"}]) \
            .choices[0].message.content == HELLO
    wait_for(lambda: victim_replica not in router_stats(APP).replicas, 60, 0.5, what="the Router drops the dead engine")
    print(f"[kill +{time.monotonic() - killed_at:.1f}s] the Router forgot the dead engine")
    assert survivor in router_stats(APP).replicas

    # A replacement pod joins: Serve starts the lost replica there and the Router routes to it.
    new = graph.cluster.add_gpu_pod()
    wait_for(lambda: new.id in placement()["Engine"].values(), 180, 1.0, what="an engine on the new pod")
    replacement = next(r for r, node in placement()["Engine"].items() if node == new.id)
    print(f"[kill +{time.monotonic() - killed_at:.1f}s] an engine runs on the replacement pod")
    wait_for(lambda: replacement in router_stats(APP).replicas, 60, 0.5, what="the Router sees the new engine")
    late = [Stream(graph.url, f"long late {i}") for i in range(4)]
    for s in late:
        s.start()
    for s in late:
        assert s.started.wait(30)
    assert router_stats(APP).replicas[replacement].in_flight > 0  # it takes traffic
    for s in late:
        s.join(60)
        assert s.finished and s.text == "tick " * TICKS, (s.prompt, s.finished, s.error)
    wait_for(lambda: router_stats(APP).in_flight == 0, 10, 0.2, what="every lease released")
    assert serve_status() == "RUNNING"


def _answers(client: openai.OpenAI) -> bool:
    try:
        r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}], timeout=5)
        return r.choices[0].message.content == HELLO
    except openai.APIError:
        return False


def test_the_cpu_pod_holding_the_router_dies(graph):
    """The pod of the Ingress, Preprocessor and Router replicas dies (Serve starts them again on another CPU pod):
    its streams end (their writer is gone), nothing waits forever, the engines end the work nobody reads, the new
    Router relearns every engine, and sessions go on from PostgreSQL."""
    client = _oai(graph)
    spare = graph.cluster.add_cpu_pod()
    (old,) = [n for n in graph.cluster.by_role("cpu") if n is not spare]
    stored = client.responses.create(model="smollm2", input="rsp-hello", store=True)
    engines = set(placement()["Engine"])
    streams = [Stream(graph.url, f"long cpu {i}", "anthropic" if i % 2 else "chat") for i in range(4)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(30)
    killed_at = time.monotonic()
    graph.cluster.kill(old)
    for s in streams:
        s.join(60)
        assert not s.is_alive(), s.prompt  # ended, not hung
        assert not s.finished or s.text == "tick " * TICKS, (s.prompt, len(s.text))  # never a short "complete" one
    wait_for(lambda: _answers(client), 180, 0.5, what="the graph answering again")
    print(f"[cpu pod kill +{time.monotonic() - killed_at:.1f}s] answering again")
    nodes = {n.id: n.role for n in graph.cluster.nodes}
    where = placement()
    for name in ("Ingress", "Preprocessor", "Router"):
        assert {nodes.get(node) for node in where[name].values()} == {"cpu"}, (name, where[name])
    wait_for(lambda: set(router_stats(APP).replicas) == engines, 60, 0.5, what="the new Router relearns the engines")
    # The engines ended the streams whose Ingress died (no work left for nobody), within the lease time.
    wait_for(lambda: engine_active(APP) == 0, 30, 0.5, what="no engine request left")
    print(f"[cpu pod kill +{time.monotonic() - killed_at:.1f}s] router relearnt, engines idle")
    assert client.responses.create(model="smollm2", previous_response_id=stored.id, input="rsp-hello again") \
        .previous_response_id == stored.id
    late = [Stream(graph.url, f"long after {i}") for i in range(2)]
    for s in late:
        s.start()
    for s in late:
        s.join(60)
        assert s.finished and s.text == "tick " * TICKS, (s.prompt, s.finished, s.error)
    wait_for(lambda: router_stats(APP).in_flight == 0, 10, 0.2, what="every lease released")
