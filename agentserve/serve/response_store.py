"""The Responses store as one Ray Serve deployment, so every ingress replica sees the same responses."""

from __future__ import annotations

from typing import Any

from ray import serve

from agentserve.apis.responses.store import ResponseStore, StoredResponse
from agentserve.config import ServeArgs


@serve.deployment(name="ResponseStore", num_replicas=1, max_ongoing_requests=4096, ray_actor_options={"num_cpus": 0})
class ResponseStoreReplica:
    """A single replica on purpose: the store is state; more replicas would split it."""

    def __init__(self, args: dict[str, Any]) -> None:
        spec = ServeArgs.from_any(args).response_store
        self._store = ResponseStore(max_entries=spec.max_entries, max_bytes=spec.max_bytes, ttl_s=spec.ttl_s)

    def put(self, response_id: str, entry: StoredResponse) -> bool:
        return self._store.put(response_id, entry)

    def get(self, response_id: str, owner: str) -> StoredResponse | None:
        return self._store.get(response_id, owner)

    def delete(self, response_id: str, owner: str) -> bool:
        return self._store.delete(response_id, owner)
