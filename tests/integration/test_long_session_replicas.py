"""A long session across two Ingress and two Preprocessor replicas (issue 28): every turn extends the previous
prompt and output exactly, whichever replicas serve it, and still after both Preprocessor replicas are replaced
mid-session (their memory of the session gone: the prompt is rebuilt from the kept turns in the state backend).

The scripted model answers each tool result with reasoning and a tool call written off the template's canonical
form, so only kept turns keep the prefix (tests/integration/replay_clients.py). What the client sees says it: the
engine's cache (the scripted engine models vLLM's, engines/scripted_cache.py) holds the full blocks of the previous
prompt and output but its last token, and the next turn's `cache_read_input_tokens` is all of them.
"""

from __future__ import annotations

import time
from typing import Iterator

import anthropic
import pytest

from agentserve.bench.graph import wait_for
from tests.integration.conftest import GRAPH_ARGS
from tests.integration.durable_graph import app_running, replica_actors
from tests.integration.replay_clients import MATCH, PARAMETERS, RESULT
from tests.support.graph import DeployedGraph, deployed_graph

pytestmark = pytest.mark.integration

REPLICAS = {"Engine": 1, "Ingress": 2, "Preprocessor": 2}
BLOCK = GRAPH_ARGS["engine"]["block_size"]


@pytest.fixture(scope="module")
def graph(model_path, tmp_path_factory) -> Iterator[DeployedGraph]:
    args = {**GRAPH_ARGS, "state": {"data_dir": str(tmp_path_factory.mktemp("long-session-state"))}}
    with deployed_graph(args, REPLICAS, __name__) as g:
        wait_for(lambda: len(replica_actors("Preprocessor")) == 2 and len(replica_actors("Ingress")) == 2, 120, 0.3,
                 what="two Preprocessor and two Ingress replicas")
        yield g


class Session:
    """An Anthropic agent loop through the official SDK: each turn sends back the model's blocks and a tool result."""

    def __init__(self, url: str) -> None:
        self.client = anthropic.Anthropic(base_url=url, api_key="test", max_retries=0)
        self.messages: list[dict] = [{"role": "user", "content": f"{MATCH} long session {time.time()}: go"}]

    previous = 0  # the previous turn's prompt + output tokens

    def turn(self) -> tuple[int, int]:
        """(cache_read_input_tokens of this turn, what the previous turn left in the cache)."""
        with self.client.messages.stream(model="smollm2", max_tokens=512, messages=self.messages,
                                         tools=[{"name": "run", "input_schema": PARAMETERS}]) as stream:
            final = stream.get_final_message()
        uses = [b for b in final.content if b.type == "tool_use"]
        assert uses, final
        self.messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]})
        self.messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": RESULT} for b in uses]})
        u = final.usage
        cached = u.cache_read_input_tokens or 0
        left = BLOCK * ((self.previous - 2) // BLOCK) if self.previous else 0  # its full blocks, last token aside
        self.previous = u.input_tokens + cached + (u.cache_creation_input_tokens or 0) + u.output_tokens
        return cached, left


def assert_whole_reuse(turns: list[tuple[int, int]]) -> None:
    for cached, left in turns:
        assert left > 0 and cached >= left, turns


def test_every_turn_reuses_the_whole_previous_turn_on_any_replica(graph):
    session = Session(graph.url)
    session.turn()  # the first turn has nothing to extend
    assert_whole_reuse([session.turn() for _ in range(8)])

    import ray

    before = {a["name"] for a in replica_actors("Preprocessor")}
    for actor in replica_actors("Preprocessor"):
        ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
    wait_for(lambda: len({a["name"] for a in replica_actors("Preprocessor")} - before) == 2 and app_running(),
             180, 0.3, what="two new Preprocessor replicas")
    assert_whole_reuse([session.turn() for _ in range(4)])  # rebuilt from the kept turns' links
