"""What integration tests ask a running graph: the Router's view and the engines' running requests."""

from __future__ import annotations

from ray import serve

from agentserve.protocol.cluster import RouterStats


def router_stats(app: str) -> RouterStats:
    return serve.get_deployment_handle("Router", app).stats.remote().result(timeout_s=10)


def engine_active(app: str) -> int:
    """Requests running in the engine replicas the router knows (each asked through a pinned call)."""
    from agentserve.protocol import RouteDecision

    handle = serve.get_deployment_handle("Engine", app)
    calls = [handle.stats.remote(RouteDecision(replica_id=r)) for r in router_stats(app).replicas]
    return sum(c.result(timeout_s=10).active for c in calls)
