"""The graph harness: the real Ray Serve graph, build_app(args), deployed on the session's cluster (cluster.py).

Two ways in, as in production:
- `running_graph(args)`: `serve.run(build_app(args))`, the imperative path of `make serve` and the benchmarks;
- `deployed_graph(args, engines)`: a Serve config applied through the controller, the declarative path of
  `serve deploy`, the dashboard and KubeRay, so a test can rescale one deployment in place by re-applying it.

Every graph is served at route "/" (as in production: the ingress picks error envelopes by path), so one app runs
at a time: deploying one deletes the previous. A module's graph is deleted when its fixture ends; a graph deployed
with `shared=True` stays after it, and the next `running_graph` with the same arguments, name and HTTP options
(its key) reuses it instead of deploying again: modules that use the same engine arguments share one graph, as
long as they run one after another (tests/conftest.py orders modules marked `graph(KEY)` together).

build_app reads the state and key environment variables (AGENTSERVE_DATA_DIR, AGENTSERVE_SECRET_KEY,
AGENTSERVE_API_KEYS, ...) in this driver, when the graph is deployed, and bakes them into the replicas' args: a
test sets them (monkeypatch) before deploying, and never shares a graph deployed under such variables.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator, TypeVar

import httpx

from tests.support.cluster import App, Cluster, cluster
from agentserve.bench.graph import wait_for

APP = "agentserve"
QUICK_STOP = {"graceful_shutdown_wait_loop_s": 0.2}
"""A stopping replica checks for in-flight requests every 0.2 s, not Serve's 2 s: an idle one (every replica of an
app deleted between modules) stops at once. Draining is unchanged: a replica with requests still waits for them."""
SMALL = {"ray_actor_options": {"num_cpus": 0.1}, **QUICK_STOP}


def _quick_stop() -> None:
    """QUICK_STOP on the deployments build_app binds in this driver (the `serve.run` path, whoever calls build_app
    here; a Serve config gets it in SMALL)."""
    from agentserve.serve import app

    for name in ("Ingress", "PreprocessorReplica", "RouterReplica", "EngineReplica"):
        deployment = getattr(app, name)
        if deployment._deployment_config.graceful_shutdown_wait_loop_s != QUICK_STOP["graceful_shutdown_wait_loop_s"]:
            setattr(app, name, deployment.options(**QUICK_STOP))


def suite_args(args: dict[str, Any]) -> dict[str, Any]:
    """`args` with the warm start off unless they configure it: the suite's graphs share one data directory
    (tests/conftest.py), so a new engine replica would otherwise prefill earlier modules' sessions, and a real vLLM
    engine would spend its start on them. The tests of the warm start turn it on."""
    return args if "warm_start" in args else {**args, "warm_start": {"enabled": False}}


def _take_root(c: Cluster) -> None:
    """Delete the app at "/" unless a module is still using it (a module-scoped graph fixture nested in another)."""
    if c.app is not None and c.app.key is None:
        raise RuntimeError(f"a graph is already running for {c.app.name}; make graph fixtures module-scoped")
    c.clear()


def _key(args: dict[str, Any], name: str, http_options: dict[str, Any] | None) -> str:
    return json.dumps([args, name, http_options or {}], sort_keys=True, default=str)


@contextmanager
def running_graph(
    args: dict[str, Any],
    *,
    name: str = APP,
    http_options: dict[str, Any] | None = None,
    shared: bool = False,
) -> Iterator[str]:
    """Deploy build_app(args) with `serve.run` at "/" on the session's cluster, yield the base URL, delete it after
    (a shared graph: keep it for the next user of the same key). `http_options` other than the session's restart
    Serve (not Ray) with them."""
    from ray import serve

    from agentserve.serve.app import build_app

    _quick_stop()
    c = cluster(http_options)
    key = _key(args, name, http_options) if shared else None
    if key is not None and c.app is not None and c.app.key == key:
        yield c.url  # the same graph, deployed by an earlier module
        return
    _take_root(c)
    serve.run(build_app(suite_args(args)), name=name, route_prefix="/")
    c.app = App(name, key)
    try:
        yield c.url
    finally:
        if key is None and c.app is not None and c.app.name == name:
            c.clear()


def serve_config(args: dict[str, Any], port: int, engines: dict[str, int]) -> dict[str, Any]:
    """One app: each deployment named in `engines` (the Engine deployments, and any other to scale) with the given
    number of replicas, Ingress, Preprocessor and Router otherwise one each; every replica asks for 0.1 CPU so
    several fit a 2-core machine."""
    fixed = [{"name": name, "num_replicas": 1, **SMALL} for name in ("Ingress", "Preprocessor", "Router")
             if name not in engines]
    scaled = [{"name": name, "num_replicas": n, **SMALL} for name, n in engines.items()]
    return {
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [
            {"name": APP, "route_prefix": "/", "import_path": "agentserve.serve.app:build_app", "args": suite_args(args),
             "deployments": fixed + scaled}
        ],
    }


class DeployedGraph:
    """A graph deployed from a Serve config (the declarative path); `deploy` re-applies it with other replica
    counts, as an operator does."""

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
    """Deploy the config on the session's cluster, wait until the app runs and the ingress answers; delete it after."""
    with config_app() as c:
        graph = cls(args, c.port)
        graph.deploy(engines)
        wait_for(lambda: graph.status() == "RUNNING", 180, 0.3, what="the app")
        wait_for(lambda: httpx.get(f"{graph.url}/health").status_code == 200, 60, 0.3, what="the ingress")
        yield graph


@contextmanager
def config_app() -> Iterator[Cluster]:
    """Route "/" of the session's cluster for an app named APP that the caller deploys from a Serve config
    (serve_config); the app is deleted after."""
    c = cluster()
    _take_root(c)
    c.app = App(APP, None, declarative=True)
    try:
        yield c
    finally:
        if c.app is not None and c.app.name == APP:
            c.clear()
