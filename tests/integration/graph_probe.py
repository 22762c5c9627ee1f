"""What integration tests ask a running graph: the Router's view, the engines' running requests, and waiting for
a condition while components restart."""

from __future__ import annotations

import time
from typing import Callable

from ray import serve

from agentserve.protocol.cluster import RouterStats


def wait_for(pred: Callable[[], bool], timeout: float = 30.0, every: float = 0.1, *, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except Exception:  # noqa: BLE001 - a component restarting
            pass
        time.sleep(every)
    raise AssertionError(f"{what} not met within {timeout}s")


def router_stats(app: str) -> RouterStats:
    return serve.get_deployment_handle("Router", app).stats.remote().result(timeout_s=10)


def engine_active(app: str) -> int:
    """Requests running in the engine replicas the router knows (each asked through a pinned call)."""
    from agentserve.protocol import RouteDecision

    handle = serve.get_deployment_handle("Engine", app)
    calls = [handle.stats.remote(RouteDecision(replica_id=r)) for r in router_stats(app).replicas]
    return sum(c.result(timeout_s=10).active for c in calls)
