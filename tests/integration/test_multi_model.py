"""Two models in one graph (the catalog form, `models:`): each with its own Engine deployment, one Ingress,
Preprocessor and Router for both.

Scripted engines whose replies name their model show which engine answered each API. The graph is deployed
from a Serve config (the declarative path of `serve deploy`, the dashboard and KubeRay), so one model's engine
can be rescaled in place by re-applying the config, as an operator does.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Iterator

import anthropic
import httpx
import openai
import pytest

from tests.support.graph import DeployedGraph, deployed_graph
from tests.support.keys import signing_key
from agentserve.bench.graph import wait_for

pytestmark = pytest.mark.integration

MAIN, HAIKU = "agent/main", "agent/haiku"
LONG = "tick " * 600  # ~36 s at 60 ms a token: outlasts a scale-up on a 2-core machine running two test workers


def _rules(name: str) -> list[dict[str, Any]]:
    return [
        {"match": "long stream", "reply": LONG, "itl_ms": 60},
        {"match": "", "reply": f"This is the {name} engine.", "itl_ms": 0},
    ]


ARGS = {
    "secret_key": signing_key("graph"),
    "models": [
        {"id": MAIN, "aliases": ["claude-main", "gpt-main"],
         "engine": {"kind": "scripted", "block_size": 16, "rules": _rules("main")}},
        {"id": HAIKU, "aliases": ["claude-haiku"], "context_window": 4096,
         "engine": {"kind": "scripted", "block_size": 16, "rules": _rules("haiku")}},
    ],
}
ENGINES = {MAIN: "Engine-agent-main", HAIKU: "Engine-agent-haiku"}


class Graph(DeployedGraph):
    def scale_haiku(self, replicas: int) -> None:
        self.deploy({ENGINES[MAIN]: 1, ENGINES[HAIKU]: replicas})

    def running(self, model: str) -> set[str]:  # type: ignore[override]
        return super().running(ENGINES[model])

    def router_view(self, model: str) -> dict[str, int]:
        return self.router().replicas.remote(model).result(timeout_s=10)


@pytest.fixture(scope="module")
def graph(model_path) -> Iterator[Graph]:
    with deployed_graph(ARGS, {ENGINES[MAIN]: 1, ENGINES[HAIKU]: 1}, __name__, Graph) as g:
        for model in (MAIN, HAIKU):
            wait_for(lambda m=model: set(g.router_view(m)) == g.running(m) != set(), 90, 0.3, what=f"the router to see {model}'s engine")
        yield g


def _openai(g: Graph) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{g.url}/v1", api_key="k", max_retries=0)


def _anthropic(g: Graph) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=g.url, api_key="k", max_retries=0)


# -- each API reaches the right engine -------------------------------------------------------------------------


@pytest.mark.parametrize("name, engine", [(MAIN, "main"), ("gpt-main", "main"), (HAIKU, "haiku"), ("claude-haiku", "haiku")])
def test_every_api_reaches_the_named_models_engine(graph, name, engine):
    expected = f"This is the {engine} engine."
    chat = _openai(graph).chat.completions.create(model=name, messages=[{"role": "user", "content": "Who are you?"}])
    assert chat.choices[0].message.content == expected and chat.model == name
    resp = _openai(graph).responses.create(model=name, input="Who are you?")
    assert resp.output_text == expected
    msg = _anthropic(graph).messages.create(
        model=name, max_tokens=64, messages=[{"role": "user", "content": "Who are you?"}]
    )
    assert msg.content[0].text == expected and msg.model == name
    with _anthropic(graph).messages.stream(
        model=name, max_tokens=64, messages=[{"role": "user", "content": "Who are you, streamed?"}]
    ) as stream:
        assert stream.get_final_text() == expected


def test_counts_and_windows_are_per_model(graph):
    """count_tokens answers for the named model; the haiku model's smaller window refuses what main accepts."""
    prompt = "word " * 5000  # ~5K tokens: inside main's 8192 window, past haiku's 4096
    count = _anthropic(graph).messages.count_tokens(model="claude-main", messages=[{"role": "user", "content": prompt}])
    assert 4096 < count.input_tokens < 8192
    with pytest.raises(openai.BadRequestError) as err:
        _openai(graph).chat.completions.create(model=HAIKU, messages=[{"role": "user", "content": prompt}], max_tokens=8)
    assert err.value.body["code"] == "context_length_exceeded"
    tok = httpx.post(f"{graph.url}/tokenize", json={"model": "claude-haiku", "prompt": "hello"}).json()
    assert tok["max_model_len"] == 4096


# -- the catalog ------------------------------------------------------------------------------------------------


def test_models_lists_both_models_in_each_apis_shape(graph):
    names = {MAIN, "claude-main", "gpt-main", HAIKU, "claude-haiku"}
    assert {m.id for m in _openai(graph).models.list()} == names
    assert {m.id for m in _anthropic(graph).models.list()} == names
    assert _anthropic(graph).models.retrieve("claude-haiku").max_input_tokens == 4096
    codex = httpx.get(f"{graph.url}/v1/models", params={"client_version": "0.171.0"}).json()
    assert {m["slug"] for m in codex["models"] if m["visibility"] == "list"} == {MAIN, HAIKU}
    assert {m["slug"]: m["context_window"] for m in codex["models"]}["claude-haiku"] == 4096


def test_unknown_model_is_a_404_in_each_apis_envelope(graph):
    with pytest.raises(openai.NotFoundError) as chat:
        _openai(graph).chat.completions.create(model="agent/none", messages=[{"role": "user", "content": "hi"}])
    assert chat.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError) as resp:
        _openai(graph).responses.create(model="agent/none", input="hi")
    assert resp.value.body["code"] == "model_not_found"
    with pytest.raises(anthropic.NotFoundError) as msg:
        _anthropic(graph).messages.create(model="agent/none", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert msg.value.body["type"] == "error" and msg.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.NotFoundError):
        _anthropic(graph).messages.count_tokens(model="agent/none", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.NotFoundError):
        _anthropic(graph).models.retrieve("agent/none")


# -- one prefix index per model --------------------------------------------------------------------------------


def _overlap_sum(g: Graph, model: str) -> float:
    text = httpx.get(f"{g.url}/metrics").text
    m = re.search(rf'agentserve_route_overlap_blocks_sum{{model="{re.escape(model)}"}} ([0-9.e+]+)', text)
    return float(m.group(1)) if m else 0.0


def test_a_prefix_cached_under_one_model_is_no_hit_for_the_other(graph):
    client = _openai(graph)
    system = "You are a careful assistant for the prefix test. " * 20  # ~200 tokens: a dozen 16-token blocks
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Same prompt, two models?"}]

    def ask(model: str) -> int:
        r = client.chat.completions.create(model=model, messages=messages)
        return r.usage.prompt_tokens_details.cached_tokens

    before_main, before_haiku = _overlap_sum(graph, MAIN), _overlap_sum(graph, HAIKU)
    assert ask(MAIN) == 0
    assert ask(MAIN) >= 160  # main's engine has it now, and the router knew: overlap counted
    assert _overlap_sum(graph, MAIN) - before_main >= 10
    assert ask(HAIKU) == 0  # the same tokens under the other model: not cached there, and no overlap expected
    assert _overlap_sum(graph, HAIKU) == before_haiku


# -- scaling one model's engine --------------------------------------------------------------------------------


class Stream(threading.Thread):
    def __init__(self, g: Graph, model: str, prompt: str) -> None:
        super().__init__(daemon=True)
        self.g, self.model, self.prompt = g, model, prompt
        self.text, self.error = "", None
        self.started = threading.Event()

    def run(self) -> None:
        try:
            stream = _openai(self.g).chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": self.prompt}], stream=True
            )
            for chunk in stream:
                if chunk.choices:
                    self.text += chunk.choices[0].delta.content or ""
                self.started.set()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion
            self.error = repr(exc)
        finally:
            self.started.set()


def test_scaling_one_models_engine_leaves_the_other_models_streams_intact(graph):
    main_replicas = graph.running(MAIN)
    streams = [Stream(graph, MAIN, f"long stream {i}") for i in range(3)]
    for s in streams:
        s.start()
    assert all(s.started.wait(30) for s in streams)

    graph.scale_haiku(2)  # re-apply the config with one model's engine scaled up
    wait_for(lambda: len(graph.running(HAIKU)) == 2, 90, 0.3, what="two haiku engine replicas")
    wait_for(lambda: set(graph.router_view(HAIKU)) == graph.running(HAIKU), 90, 0.3, what="the router to see both")
    assert any(s.is_alive() for s in streams), "the streams ended before the scale-up: make them longer"
    assert graph.running(MAIN) == main_replicas  # untouched
    haiku = _openai(graph).chat.completions.create(model=HAIKU, messages=[{"role": "user", "content": "and you?"}])
    assert haiku.choices[0].message.content == "This is the haiku engine."

    graph.scale_haiku(1)  # and back down, main's streams still running
    wait_for(lambda: len(graph.running(HAIKU)) == 1, 90, 0.3, what="one haiku engine replica")
    for s in streams:
        s.join(60)
        assert s.error is None, s.error
        assert s.text == LONG, (s.prompt, len(s.text))  # every token, in order
    assert graph.running(MAIN) == main_replicas
    wait_for(lambda: set(graph.router_view(HAIKU)) == graph.running(HAIKU), 60, 0.3, what="the router to drop the stopped replica")
    assert set(graph.router_view(MAIN)) == main_replicas
