"""LoRA adapters loaded at run time through POST /v1/admin/adapters, on a real Serve graph (scripted engine).

Scripted rules that answer only under one adapter show which adapter served a request. The graph is deployed from
a Serve config, so the model's Engine can be scaled in place as an operator does; a replica added after the load
must serve the adapter too.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import httpx
import openai
import pytest

from agentserve.ingress.middleware.auth import hash_key
from tests.support.graph import APP, DeployedGraph, deployed_graph
from tests.support.keys import signing_key
from agentserve.bench.graph import wait_for

pytestmark = pytest.mark.integration

MODEL, ENGINE = "agent/main", "Engine-agent-main"
KEY = "api-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
ADMIN_KEY = "admin-test-key"  # the admin route's own credential: an API key does not open it
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}

ARGS = {
    "secret_key": signing_key("graph"),
    "api_keys": [hash_key(KEY)],
    "admin": {"keys": [hash_key(ADMIN_KEY)], "adapter_root": "/adapters"},
    "models": [
        {
            "id": MODEL,
            "aliases": ["main"],
            # A declared adapter turns LoRA on for this model's engine (vLLM needs it to load others at run time).
            "adapters": [{"id": "declared", "path": "/adapters/declared"}],
            "engine": {
                "kind": "scripted",
                "block_size": 16,
                "rules": [
                    {"match": "", "adapter": "pirate", "reply": "Arr, the pirate adapter.", "itl_ms": 0},
                    {"match": "", "adapter": "scribe", "reply": "Thus writes the scribe adapter.", "itl_ms": 0},
                    {"match": "", "reply": "The base model.", "itl_ms": 0},
                ],
            },
        }
    ],
}


class Graph(DeployedGraph):
    def scale(self, replicas: int) -> None:
        self.deploy({ENGINE: replicas})

    def running(self) -> set[str]:  # type: ignore[override]
        return super().running(ENGINE)

    def router_view(self) -> set[str]:
        return set(self.router().replicas.remote(MODEL).result(timeout_s=10))

    @staticmethod
    def started(replica: str) -> int:
        """How many requests one engine replica has started (a stats call pinned to it)."""
        from ray import serve

        from agentserve.protocol import RouteDecision

        s = serve.get_deployment_handle(ENGINE, APP).stats.remote(RouteDecision(replica_id=replica)).result(timeout_s=10)
        assert s.replica_id == replica
        return s.started

    def load(self, body: dict[str, Any], headers: dict[str, str] | None = ADMIN) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/admin/adapters", json=body, headers=headers, timeout=60)

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=KEY, max_retries=0)

    def ask(self, model: str, text: str = "Who answers?") -> openai.types.chat.ChatCompletion:
        return self.openai().chat.completions.create(model=model, messages=[{"role": "user", "content": text}])


@pytest.fixture(scope="module")
def graph(model_path) -> Iterator[Graph]:
    with deployed_graph(ARGS, {ENGINE: 1}, __name__, Graph) as g:
        wait_for(lambda: g.router_view() == g.running() != set(), 90, 0.3, what="the router to see the engine")
        yield g


@pytest.fixture(scope="module")
def pirate(graph) -> dict[str, Any]:
    """The adapter loaded at run time by the module's first admin call."""
    r = graph.load({"model": "main", "id": "pirate", "path": "/adapters/pirate", "aliases": ["arr"]})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_admin_route_needs_a_key(graph):
    r = graph.load({"model": MODEL, "id": "nokey", "path": "/adapters/nokey"}, headers=None)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"
    assert graph.load({"model": MODEL, "id": "x", "path": "/p"}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert graph.load({"model": MODEL, "id": "x", "path": "/adapters/x"}, headers=AUTH).status_code == 401  # an API key


def test_a_path_outside_the_adapter_root_is_refused_before_any_engine_sees_it(graph):
    for path in ("HuggingFaceTB/some-adapter", "/adapters/../etc", "/etc/passwd"):
        r = graph.load({"model": MODEL, "id": "outside", "path": path})
        assert r.status_code == 400 and r.json()["error"]["code"] == "adapter_path_refused", (path, r.text)


def test_a_loaded_adapter_answers_under_its_id_and_alias(graph, pirate):
    assert pirate["id"] == "pirate" and pirate["parent"] == MODEL
    assert set(pirate["replicas"]) == graph.running()  # every replica of the model's engine holds it
    for name in ("pirate", "arr"):
        r = graph.ask(name)
        assert r.choices[0].message.content == "Arr, the pirate adapter."
        assert r.model == name
    assert graph.ask(MODEL).choices[0].message.content == "The base model."


def test_models_lists_it_under_its_base_model(graph, pirate):
    cards = {m.id: m for m in graph.openai().models.list().data}
    assert {"pirate", "arr", "declared", MODEL} <= set(cards)
    assert cards["pirate"].model_extra["parent"] == MODEL
    assert cards["arr"].model_extra["root"] == "pirate"
    tok = httpx.post(f"{graph.url}/tokenize", json={"model": "pirate", "prompt": "hello"}, headers=AUTH).json()
    assert tok["count"] > 0


def test_a_served_name_cannot_be_loaded_again(graph, pirate):
    for body in (
        {"model": MODEL, "id": "pirate", "path": "/adapters/other"},  # a run-time adapter's id
        {"model": MODEL, "id": "fresh", "path": "/adapters/fresh", "aliases": ["arr"]},  # ... or its alias
        {"model": MODEL, "id": "declared", "path": "/adapters/declared"},  # a declared adapter
        {"model": MODEL, "id": "main", "path": "/adapters/x"},  # a model alias
    ):
        r = graph.load(body)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["code"] == "adapter_exists", err
        assert "already served" in err["message"]
    with pytest.raises(openai.NotFoundError):  # the refused load left nothing behind
        graph.ask("fresh")


def test_an_unknown_model_or_a_bad_body_is_refused_in_openais_envelope(graph):
    r = graph.load({"model": "no-such-model", "id": "orphan", "path": "/adapters/orphan"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"
    r = graph.load({"model": MODEL, "id": "has space", "path": "/p", "rank": 8})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{graph.url}/v1/admin/adapters", content=b"{not json", headers=ADMIN)
    assert r.status_code == 400 and "error" in r.json()


def _overlap_sum(g: Graph) -> float:
    text = httpx.get(f"{g.url}/metrics", headers=AUTH).text
    m = re.search(rf'agentserve_route_overlap_blocks_sum{{model="{re.escape(MODEL)}"}} ([0-9.e+]+)', text)
    return float(m.group(1)) if m else 0.0


def test_a_prefix_cached_under_one_adapter_is_no_hit_under_another(graph, pirate):
    r = graph.load({"model": MODEL, "id": "scribe", "path": "/adapters/scribe"})
    assert r.status_code == 200, r.text
    client = graph.openai()
    system = "You are a careful assistant for the adapter prefix test. " * 20  # a dozen 16-token blocks
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Same prompt, two adapters?"}]

    def ask(model: str) -> tuple[int, str]:
        r = client.chat.completions.create(model=model, messages=messages)
        return r.usage.prompt_tokens_details.cached_tokens, r.choices[0].message.content

    assert ask("pirate") == (0, "Arr, the pirate adapter.")
    before = _overlap_sum(graph)
    cached, _ = ask("pirate")
    assert cached >= 160  # cached under pirate, and the router knew: overlap counted
    assert _overlap_sum(graph) - before >= 10
    before = _overlap_sum(graph)
    assert ask("scribe") == (0, "Thus writes the scribe adapter.")  # same tokens, another adapter: no hit
    assert _overlap_sum(graph) == before
    assert ask(MODEL)[0] == 0  # nor under the base model


def test_a_replica_added_later_serves_the_adapter(graph, pirate):
    first = graph.running()
    graph.scale(2)
    wait_for(lambda: len(graph.running()) == 2, 90, 0.3, what="two engine replicas")
    wait_for(lambda: graph.router_view() == graph.running(), 90, 0.3, what="the router to see both")
    (new,) = graph.running() - first
    router = graph.router()
    router.set_policy.remote("round_robin").result(timeout_s=10)  # every replica gets its turn
    try:
        before = graph.started(new)
        for i in range(4):
            r = graph.ask("pirate", f"Round {i}: who answers?")
            assert r.choices[0].message.content == "Arr, the pirate adapter."
        assert graph.started(new) - before >= 1  # the new replica served some of them, under the adapter
    finally:
        router.set_policy.remote("kv").result(timeout_s=10)


def test_a_restarted_router_relearns_run_time_adapters_from_the_engines(graph, pirate):
    import ray

    details = graph._client.get_serve_details()["applications"][APP]["deployments"]["Router"]
    (old,) = [r for r in details["replicas"] if r["state"] == "RUNNING"]
    ray.kill(ray.get_actor(old["actor_name"], namespace="serve"), no_restart=True)  # Serve starts a new Router

    def replaced() -> bool:
        now = graph._client.get_serve_details()["applications"][APP]["deployments"]["Router"]["replicas"]
        return [r["replica_id"] for r in now if r["state"] == "RUNNING"] not in ([], [old["replica_id"]])

    wait_for(replaced, 60, 0.3, what="Serve to replace the Router")

    def relearnt() -> bool:
        runtime = graph.router().adapters.remote().result(timeout_s=5)
        return "pirate" in {a.id for entry in runtime if entry.model == MODEL for a in entry.adapters}

    wait_for(relearnt, 60, 0.3, what="the new Router to relearn the adapters from the engine replicas' registrations")
    assert graph.load({"model": MODEL, "id": "pirate", "path": "/adapters/other"}).status_code == 400  # still served
    assert graph.ask("arr").choices[0].message.content == "Arr, the pirate adapter."
