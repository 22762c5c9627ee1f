"""A scripted graph that tests can restart the ways production does: one replica, a redeploy, the whole app."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import openai
import pytest

from tests.support.cluster import CLUSTER
from tests.support.graph import running_graph, suite_args
from agentserve.bench.graph import wait_for
from tests.integration.api.test_responses_events import SHELL_TOOL
from tests.integration.conftest import GRAPH_ARGS, RULES

APP = "agentserve"

# Matched before the shared rules (on the last user text).
DURABLE_RULES = [
    {"match": "DUR_THINK", "reply": "<think>Plan the upgrade carefully.</think>Ready to continue.", "itl_ms": 0},
    {"match": "DUR_NEXT", "reply": "Continuing where we left off.", "itl_ms": 0},
]


def graph_args(state: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The integration graph's args; state None: no `state:` section, as in the shipped serve_config.yaml."""
    engine = {**GRAPH_ARGS["engine"], "rules": [*DURABLE_RULES, *RULES]}
    return {**GRAPH_ARGS, "engine": engine, **({"state": state} if state is not None else {}), **extra}


def replica_actors(deployment: str) -> list[dict[str, str]]:
    import ray

    return [a for a in ray.util.list_named_actors(all_namespaces=True) if f"#{deployment}#" in a["name"]]


def app_running() -> bool:
    from ray import serve

    app = serve.status().applications.get(APP)
    return app is not None and app.status == "RUNNING" and all(d.status == "HEALTHY" for d in app.deployments.values())


class RestartableGraph:
    """The real Ray Serve graph (running_graph) plus the three restarts a deployment lives through."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self._stack = ExitStack()
        self.url = ""

    def start(self) -> None:
        self.url = self._stack.enter_context(running_graph(self.args, name=APP))

    def stop(self) -> None:
        self._stack.close()

    def restart_ingress_replica(self) -> None:
        """Kill the Ingress replica's actor (the process that opened the Responses store); Serve starts a new one."""
        import ray

        (old,) = replica_actors("Ingress")
        ray.kill(ray.get_actor(old["name"], namespace=old["namespace"]), no_restart=True)
        wait_for(lambda: [a["name"] for a in replica_actors("Ingress")] not in ([], [old["name"]]) and app_running(), 120, 0.2, what="a new Ingress replica")

    def redeploy(self, args: dict[str, Any] | None = None) -> None:
        """`serve.run` again (an upgrade): every replica is replaced."""
        from ray import serve

        from agentserve.serve.app import build_app

        before = {a["name"] for a in replica_actors("Ingress")}
        self.args = args or self.args
        serve.run(build_app(suite_args(self.args)), name=APP, route_prefix="/")
        wait_for(lambda: {a["name"] for a in replica_actors("Ingress")} - before != set() and app_running(), 120, 0.2, what="the redeployed app")

    def full_restart(self) -> None:
        """serve.shutdown + ray.shutdown, then start again from the same config (restarting `make serve`)."""
        self.stop()
        CLUSTER.restart()
        self.start()


# -- a Responses session chained by previous_response_id ------------------------------------------------------
def oai(graph: RestartableGraph, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{graph.url}/v1", api_key=key, max_retries=0)


def start_chain(graph: RestartableGraph):
    """Two stored turns chained by previous_response_id: a tool call, then its output."""
    client = oai(graph)
    turn1 = client.responses.create(model="smollm2", input="rsp-shell: list files", tools=[SHELL_TOOL], store=True)
    (call,) = turn1.output
    turn2 = client.responses.create(
        model="smollm2",
        previous_response_id=turn1.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rsp-out: a.txt"}],
        tools=[SHELL_TOOL],
    )
    assert turn2.output_text == "There are two files."
    return turn1, turn2


def assert_chain_survived(graph: RestartableGraph, turn1, turn2) -> None:
    client = oai(graph)
    assert client.responses.retrieve(turn1.id).output[0].call_id == turn1.output[0].call_id
    assert client.responses.retrieve(turn2.id).output_text == "There are two files."
    with pytest.raises(openai.NotFoundError):
        oai(graph, "key-b").responses.retrieve(turn2.id)  # still scoped to the API key
    # Continue the chain: the stored history of both turns becomes the prompt again.
    alone = client.responses.create(model="smollm2", input="rsp-hello again", store=False)
    turn3 = client.responses.create(model="smollm2", previous_response_id=turn2.id, input="rsp-hello again")
    assert turn3.output_text == "Hello from responses." and turn3.previous_response_id == turn2.id
    # (the user turn, the call, its output and the answer: about 80 tokens more than the input alone)
    assert turn3.usage.input_tokens > alone.usage.input_tokens + 40
