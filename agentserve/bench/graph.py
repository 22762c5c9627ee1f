"""The real Ray Serve graph, started in this process: for benchmarks, and for the tests (which import it from here).

`running_graph(args)` starts a local Ray instance, deploys `build_app(args)` through Serve on a free loopback port,
yields the base URL and tears everything down; `running_graphs({...})` deploys several applications on route
prefixes of one Serve instance (two configurations side by side, each with its own engine). `args` is a ServeArgs or
its dict form (serve_config.yaml's `args`).

By default the graph's processes get the environment `make serve` ships (`ray_env.beside_others()`: SERVE_ENV plus
free ports for HAProxy mode's fixed listeners, so several graphs can share the machine); the driver keeps Serve's
defaults (its sync `.result()` calls on handles need the handle router on its own loop). `shipped_env=False` starts
Ray with its defaults instead (how the preamble and router_vllm benchmarks have always run).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, TypeVar

from agentserve.ports import free_port

__all__ = ["GraphURL", "free_port", "running_declared_graph", "running_graph", "running_graphs", "wait_for"]

T = TypeVar("T")
_graph_running: list[str] = []


class GraphURL(str):
    """The graph's base URL, with how long its applications took to deploy (`serve.run` of all of them, after Ray
    and Serve were up): `deploy_s`; from Serve's start to the last application deployed: `serve_s`."""

    deploy_s: float = 0.0
    serve_s: float = 0.0


def _args_dict(args: Any) -> dict[str, Any] | None:
    from agentserve.config import ServeArgs

    if isinstance(args, ServeArgs):
        return args.model_dump(mode="json", exclude_unset=True)
    return args


_data_dir: list[str] = []


def _own_state(args: dict[str, Any] | None) -> dict[str, Any] | None:
    """`args` with the state in this process's own temporary directory unless they name one: a benchmark or test
    run neither reads what earlier runs left in the user's data directory (a store grown by every run before made
    later figures depend on the order of runs) nor leaves its own there. One directory per process, so graphs
    started one after another in it (a restart) still share their state."""
    if args is None or "data_dir" in (args.get("state") or {}) or os.environ.get("AGENTSERVE_DATA_DIR"):
        return args
    if not _data_dir:
        _data_dir.append(tempfile.mkdtemp(prefix="agentserve-graph-state-"))
        atexit.register(shutil.rmtree, _data_dir[0], True)
    return {**args, "state": {**(args.get("state") or {}), "data_dir": _data_dir[0]}}


def start_ray(
    *, num_cpus: int = 8, shipped_env: bool = True, env: Mapping[str, str] | None = None, dashboard: bool = False
) -> str:
    """A local Ray instance whose processes get the environment `make serve` ships (agentserve/serve/ray_env.py),
    with `env` on top; this driver keeps Ray's defaults (its sync `.result()` calls on handles need the handle router
    on its own loop). `dashboard`: Ray's dashboard too, as `make serve` starts it, on a free port of 127.0.0.1 (its
    REST API applies Serve configs: it is the operator's console, never on a public address). Returns the
    dashboard's URL ("" without it)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import ray

    from agentserve.serve import ray_env

    # address="local": a Ray instance of its own, never the cluster another process started on this machine
    # (`make serve`, another suite), which ray.init() would otherwise join through /tmp/ray/ray_current_cluster.
    init: dict[str, Any] = {"address": "local", "num_cpus": num_cpus, "include_dashboard": dashboard,
                            "log_to_driver": False}
    if dashboard:
        init.update(dashboard_host="127.0.0.1", dashboard_port=free_port())
    if shipped_env:
        init.update(ignore_reinit_error=True, runtime_env={"env_vars": {**ray_env.beside_others(), **(env or {})}})
    context = ray.init(**init)
    url = getattr(context, "dashboard_url", "") or ""
    return f"http://{url}" if url and not url.startswith("http") else url


def start_serve(http_options: dict[str, Any] | None = None) -> int:
    """Serve on 127.0.0.1 and a free port (unless `http_options` say otherwise); the port."""
    from ray import serve

    options = {"host": "127.0.0.1", "port": free_port(), **(http_options or {})}
    serve.start(http_options=options)
    return int(options["port"])


@contextmanager
def running_graphs(
    apps: Mapping[str, tuple[Any, str]],
    *,
    http_options: dict[str, Any] | None = None,
    shipped_env: bool = True,
    num_cpus: int = 8,
) -> Iterator[GraphURL]:
    """Start Ray and Serve, deploy each `name: (args, route_prefix)`, yield the base URL (no prefix), tear down.

    One graph at a time per process: a second `serve.run` of the same app name would silently replace the first
    one's config, so a second call while one runs raises.
    """
    import ray
    from ray import serve

    from agentserve.serve.app import build_app

    if _graph_running:
        raise RuntimeError(f"a graph is already running for {_graph_running[0]}; make graph fixtures module-scoped")
    _graph_running.append(",".join(apps))
    start_ray(num_cpus=num_cpus, shipped_env=shipped_env)
    try:
        t_serve = time.perf_counter()
        port = start_serve(http_options)
        t0 = time.perf_counter()
        for name, (args, prefix) in apps.items():
            serve.run(build_app(_own_state(_args_dict(args))), name=name, route_prefix=prefix)
        url = GraphURL(f"http://127.0.0.1:{port}")
        url.deploy_s = time.perf_counter() - t0
        url.serve_s = time.perf_counter() - t_serve
        yield url
    finally:
        _graph_running.clear()
        serve.shutdown()
        ray.shutdown()


@contextmanager
def running_declared_graph(
    args: Any, deployments: list[dict[str, Any]], *, name: str = "agentserve", num_cpus: int = 8,
    env: Mapping[str, str] | None = None,
) -> Iterator[GraphURL]:
    """The graph deployed from a Serve config, as `serve deploy` and KubeRay apply it (the imperative path cannot
    set a deployment's replicas or request router): `deployments` are the config's per-deployment overrides, e.g.
    `[{"name": "Preprocessor", "num_replicas": 2}]`; `env`: for the graph's processes, on top of what `make serve`
    ships. Its own Ray instance, torn down after."""
    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    if _graph_running:
        raise RuntimeError(f"a graph is already running for {_graph_running[0]}")
    _graph_running.append(name)
    start_ray(num_cpus=num_cpus, env=env)
    try:
        t0 = time.perf_counter()
        port = start_serve()
        app = {"name": name, "route_prefix": "/", "import_path": "agentserve.serve.app:build_app",
               "args": _own_state(_args_dict(args)), "deployments": deployments}
        _get_global_client().deploy_apps(ServeDeploySchema.model_validate(
            {"http_options": {"host": "127.0.0.1", "port": port}, "applications": [app]}))

        def running() -> bool:
            status = serve.status().applications.get(name)
            if status is not None and status.status == "DEPLOY_FAILED":
                raise RuntimeError(f"{name} failed to deploy: {status.message}")
            return status is not None and status.status == "RUNNING"

        wait_for(running, 300, 0.5, what=f"{name} running")
        url = GraphURL(f"http://127.0.0.1:{port}")
        url.deploy_s = url.serve_s = time.perf_counter() - t0
        yield url
    finally:
        _graph_running.clear()
        serve.shutdown()
        ray.shutdown()


@contextmanager
def running_graph(
    args: Any, *, name: str = "agentserve", http_options: dict[str, Any] | None = None, shipped_env: bool = True
) -> Iterator[GraphURL]:
    """Start Ray, deploy build_app(args) through Serve at `/`, yield the base URL, tear everything down."""
    with running_graphs({name: (args, "/")}, http_options=http_options, shipped_env=shipped_env) as url:
        yield url


def wait_for(
    predicate: Callable[[], T], timeout: float = 30.0, every: float = 0.1, *, what: str = "condition"
) -> T:
    """Poll `predicate` until it returns something truthy, and return that; AssertionError after `timeout` seconds.
    An exception from the predicate (a component starting or restarting) counts as not yet; the last one is chained
    to the timeout's error."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = None
        except Exception as exc:  # noqa: BLE001 - not ready yet
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout}s") from last
        time.sleep(every)
