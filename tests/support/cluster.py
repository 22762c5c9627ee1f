"""The test session's Ray cluster: started on first use, shared by every module that deploys a graph, stopped at the
end of the session (tests/conftest.py).

`ray.init` costs ~15 s on a 2-core machine, a graph's deploy a few seconds: modules deploy their apps on this one
cluster and delete them after (tests/support/graph.py). Only a test that restarts the cluster itself calls
`restart()` (the next module then finds a fresh cluster).

Ray starts with the environment `make serve` ships (agentserve/serve/ray_env.py, with free ports for the listeners
HAProxy mode puts on fixed ones, so concurrent test runs on one machine do not collide), but for TEST_ENV; this driver
keeps Serve's
defaults (its sync `.result()` calls on handles need the handle router on its own loop). Serve listens on a free
port; a graph that needs other HTTP options (say a short request_timeout_s) restarts Serve, not Ray.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agentserve.bench.graph import start_ray, start_serve

logger = logging.getLogger(__name__)

TEST_ENV = {"RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "0", "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.1"}
"""- A stopping Ingress replica skips the 3 s it stays reachable for a load balancer to deregister it (HAProxy here
  retries a refused connection on another server): each app deleted between modules stops in ~1 s instead of 4. It
  still closes its listener first and waits for its in-flight requests, which test_faults' redeploy drain checks.
- The controller's loop runs at Serve's default 0.1 s again (ray_env's 0.5 s is for a cluster at rest, which the
  test cluster never is): every step of a deploy or delete is seen sooner, ~1 s less for each (measured: deploy
  and delete of the integration graph 10.4 + 2.0 s -> 8.2-9.3 + 1.0 s)."""


@dataclass
class App:
    """The app serving route "/" (one at a time: every graph is at "/", as in production)."""

    name: str
    key: str | None  # graphs that share: the same key reuses the app; None: deleted when its user is done
    declarative: bool = False


class Cluster:
    def __init__(self) -> None:
        self.http_options: dict[str, Any] | None = None  # Serve's, None while Serve is not running
        self.port = 0
        self.app: App | None = None
        self.starts = 0  # ray.init calls this session
        self.dashboard = ""  # Ray's dashboard, as `make serve` starts it: the operator's REST API and console

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ensure(self, http_options: dict[str, Any] | None = None) -> "Cluster":
        """Ray and Serve running, Serve with these HTTP options (host 127.0.0.1 and a free port added)."""
        import ray
        from ray import serve

        if not ray.is_initialized():
            # The benchmarks' launcher: the Ray environment of `make serve`, but for TEST_ENV; the dashboard on.
            self.dashboard = start_ray(env=TEST_ENV, dashboard=True)
            self.starts += 1
            self.http_options, self.app = None, None
        want = {"host": "127.0.0.1", **(http_options or {})}
        if self.http_options != want:
            if self.http_options is not None:
                logger.info("restarting Serve for HTTP options %s", want)
                self.app = None
                serve.shutdown()
            self.port = start_serve(want)
            self.http_options = want
        return self

    def clear(self) -> None:
        """Delete the app at "/", if any."""
        from ray import serve

        if self.app is not None:
            name, self.app = self.app.name, None
            serve.delete(name)

    def stop(self) -> None:
        import ray
        from ray import serve

        if ray.is_initialized():
            try:
                serve.shutdown()
            finally:
                ray.shutdown()
        self.http_options, self.app, self.dashboard = None, None, ""

    def restart(self, http_options: dict[str, Any] | None = None) -> "Cluster":
        """serve.shutdown + ray.shutdown, then both again (restarting `make serve`): nothing of the cluster survives."""
        self.stop()
        return self.ensure(http_options)


CLUSTER = Cluster()


def cluster(http_options: dict[str, Any] | None = None) -> Cluster:
    """The session's cluster, started if need be, Serve running with `http_options`."""
    return CLUSTER.ensure(http_options)
