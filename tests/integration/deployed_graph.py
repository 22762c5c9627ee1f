"""A graph deployed from a Serve config: the declarative path of `serve deploy`, the dashboard and KubeRay, so a
test can rescale one deployment in place by re-applying the config, as an operator does."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

import httpx

from tests.conftest import free_port
from tests.integration import graph_probe

APP = "agentserve"
SMALL = {"ray_actor_options": {"num_cpus": 0.1}}


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 90.0) -> None:
    graph_probe.wait_for(check, timeout_s, every=0.3, what=what)


def serve_config(args: dict[str, Any], port: int, engines: dict[str, int]) -> dict[str, Any]:
    """One app: Ingress, Preprocessor and Router with one replica each, and each Engine deployment with the given
    number of replicas; every replica asks for 0.1 CPU so several fit a 2-core machine."""
    fixed = [{"name": name, "num_replicas": 1, **SMALL} for name in ("Ingress", "Preprocessor", "Router")]
    scaled = [{"name": name, "num_replicas": n, **SMALL} for name, n in engines.items()]
    return {
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [
            {"name": APP, "route_prefix": "/", "import_path": "agentserve.serve.app:build_app", "args": args,
             "deployments": fixed + scaled}
        ],
    }


class DeployedGraph:
    def __init__(self, args: dict[str, Any], port: int) -> None:
        from ray.serve.context import _get_global_client

        self.args, self.port = args, port
        self.url = f"http://127.0.0.1:{port}"
        self._client = _get_global_client()

    def deploy(self, engines: dict[str, int]) -> None:
        from ray.serve.schema import ServeDeploySchema

        self._client.deploy_apps(ServeDeploySchema.model_validate(serve_config(self.args, self.port, engines)))

    def status(self) -> str:
        return self._client.get_serve_details()["applications"][APP]["status"]

    def running(self, deployment: str) -> set[str]:
        dep = self._client.get_serve_details()["applications"][APP]["deployments"][deployment]
        return {r["replica_id"] for r in dep["replicas"] if r["state"] == "RUNNING"}

    @staticmethod
    def router() -> Any:
        from ray import serve

        return serve.get_deployment_handle("Router", APP)


G = TypeVar("G", bound=DeployedGraph)


@contextmanager
def deployed_graph(
    args: dict[str, Any], engines: dict[str, int], owner: str, cls: type[G] = DeployedGraph  # type: ignore[assignment]
) -> Iterator[G]:
    """Start Ray and Serve with the shipped environment, deploy, wait until the app runs and the ingress answers;
    shut everything down after. One graph per test process at a time (tests/conftest.py)."""
    import ray
    from ray import serve

    from agentserve.serve import ray_env
    from tests import conftest

    if conftest._graph_running:
        raise RuntimeError(f"a graph is already running for {conftest._graph_running[0]}")
    conftest._graph_running.append(owner)
    port = free_port()
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": ray_env.beside_others()})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        graph = cls(args, port)
        graph.deploy(engines)
        wait_for("the app", lambda: graph.status() == "RUNNING", 180)
        wait_for("the ingress", lambda: httpx.get(f"{graph.url}/health").status_code == 200, 60)
        yield graph
    finally:
        conftest._graph_running.clear()
        serve.shutdown()
        ray.shutdown()
