"""Scaling the Engine deployment up and down on a running graph through Ray's dashboard, as an operator does.

Run by test_scaling.py on the session's cluster (`python -m tests.integration.scaling_scenario` runs it on a
cluster of its own).

The graph is deployed from a Serve config through the dashboard's REST API (`PUT /api/serve/applications/`: what
`serve deploy` and the dashboard use; KubeRay's serveConfigV2 reconciliation applies the same schema); scaling
re-applies the same config with a new Engine `num_replicas`, which Serve applies in place, and the replicas are
read back from the dashboard (`GET /api/serve/applications/`, what its Serve tab shows). Streams in flight must
finish intact on every replica, including a draining one, and the router must end up seeing exactly the running
replicas.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import httpx

from agentserve.ports import free_port
from agentserve.bench.graph import wait_for
from tests.support.graph import serve_config
from tests.support.keys import signing_key
from tests.support.streams import Stream

APP = "agentserve"
WORDS = 120
REPLY = "tick " * WORDS
RULES = [
    {"match": "long", "reply": REPLY, "itl_ms": 40},  # ~5 s per stream
    {"match": "", "reply": "ok", "itl_ms": 0},
]
ARGS = {"engine": {"kind": "scripted", "block_size": 16, "rules": RULES}, "secret_key": signing_key("graph")}


T0 = time.monotonic()


def logged_wait(what: str, check: Callable[[], bool], timeout_s: float = 90.0) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] waiting for {what}")  # the parent test shows this log on failure
    wait_for(check, timeout_s, 0.3, what=what)


def start_streams(url: str, tag: str, n: int) -> list[Stream]:
    streams = [Stream(url, f"long {tag} {i}") for i in range(n)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(60), "stream never started"
    return streams


class Dashboard:
    """Ray's dashboard REST API for Serve: apply a config, read the applications' deployments and replicas. Ray's
    token authentication is on by default: the calls carry the cluster's token as `serve deploy` does."""

    def __init__(self, url: str) -> None:
        from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled

        self.url = f"{url.rstrip('/')}/api/serve/applications/"
        self.headers = get_auth_headers_if_auth_enabled({})

    def up(self) -> bool:
        try:
            return httpx.get(self.url, headers=self.headers, timeout=10).status_code == 200
        except httpx.HTTPError:
            return False

    def apply(self, config: dict[str, Any]) -> None:
        r = httpx.put(self.url, json=config, headers=self.headers, timeout=60)
        assert r.status_code == 200, (r.status_code, r.text)

    def running(self, deployment: str) -> set[str]:
        app = httpx.get(self.url, headers=self.headers, timeout=10).json()["applications"].get(APP) or {}
        dep = app.get("deployments", {}).get(deployment) or {}
        return {r["replica_id"] for r in dep.get("replicas", []) if r["state"] == "RUNNING"}


def router_view() -> dict[str, int]:
    from ray import serve

    return serve.get_deployment_handle("Router", APP).replicas.remote().result(timeout_s=10)


def scenario(dashboard_url: str, port: int) -> None:
    url = f"http://127.0.0.1:{port}"
    dashboard = Dashboard(dashboard_url)
    logged_wait("the dashboard's Serve API", dashboard.up, 60)
    if dashboard.headers:  # Ray's token authentication (its default): the console refuses a caller without it
        assert httpx.get(dashboard.url, timeout=10).status_code == 401
        assert httpx.put(dashboard.url, json={"applications": []}, timeout=10).status_code == 401

    def deploy(n: int) -> None:
        dashboard.apply(serve_config(ARGS, port, {"Engine": n}))

    def running_engine_replicas() -> set[str]:
        return dashboard.running("Engine")

    deploy(1)
    logged_wait("app RUNNING", lambda: httpx.get(f"{url}/health").status_code == 200, 120)
    logged_wait("router sees the engine", lambda: set(router_view()) == running_engine_replicas() != set())
    (first,) = running_engine_replicas()

    before = start_streams(url, "before", 3)
    deploy(2)  # scale up while 3 streams are in flight
    logged_wait("2 engine replicas", lambda: len(running_engine_replicas()) == 2)
    logged_wait("router sees both", lambda: set(router_view()) == running_engine_replicas())
    (second,) = running_engine_replicas() - {first}

    during = start_streams(url, "during", 3)  # least loaded: these go to the new replica
    view = router_view()
    assert view[second] >= 1, view

    deploy(1)  # scale down while streams run on both replicas: one replica drains
    logged_wait("1 engine replica", lambda: len(running_engine_replicas()) == 1)
    after = [Stream(url, "short after scale-down")]  # new work while the other replica drains
    after[0].start()

    for s in before + during + after:
        s.join(90)
        assert s.error is None, s.error
        assert s.finished, (s.prompt, s.error)
    for s in before + during:
        assert s.text == REPLY, (s.prompt, len(s.text))  # every token, in order, across the drain
    assert after[0].text == "ok"

    survivor = running_engine_replicas()
    # The stopped replica stops heartbeating and leaves the router's view; in-flight counts return to 0.
    logged_wait("router view == Serve's replicas", lambda: set(router_view()) == survivor, 60)
    logged_wait("no requests left in flight", lambda: all(v == 0 for v in router_view().values()), 10)


def main() -> int:
    import ray
    from ray import serve

    port = free_port()
    # A cluster of its own: the declarative (config) API cannot share a Serve instance with serve.run apps.
    context = ray.init(address="local", num_cpus=8, include_dashboard=True, dashboard_host="127.0.0.1",
                       dashboard_port=free_port(), log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        scenario(f"http://{context.dashboard_url}", port)
    finally:
        serve.shutdown()
        ray.shutdown()
    print(f"[{time.monotonic() - T0:6.1f}s] scaling scenario passed")
    return 0


if __name__ == "__main__":
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    raise SystemExit(main())
