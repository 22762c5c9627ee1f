"""Router deployment: picks the engine replica for each preprocessed request."""

from __future__ import annotations

from typing import Any

from ray import serve

from agentserve.protocol import PreprocessedRequest, RouteDecision
from agentserve.routing import LeastLoadedPolicy


@serve.deployment(name="Router", num_replicas=1, max_ongoing_requests=4096)
class RouterReplica:
    """One replica: the routing state is in memory (a restart relearns it from heartbeats)."""

    def __init__(self, args: dict[str, Any]) -> None:
        self._policy = LeastLoadedPolicy()

    def heartbeat(self, replica_id: str) -> None:
        self._policy.heartbeat(replica_id)

    def route(self, request: PreprocessedRequest) -> RouteDecision:
        return self._policy.route(request)

    def release(self, request_id: str) -> None:
        self._policy.release(request_id)

    def replicas(self) -> dict[str, int]:
        return self._policy.replicas()
