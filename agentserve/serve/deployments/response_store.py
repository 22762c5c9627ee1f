"""The Responses store as one Ray Serve deployment over the configured state backend (ServeArgs.state).

The entries live in the database (a SQLite file under the data directory, or PostgreSQL), not in this actor:
a restarted replica, a redeploy or a restart of the whole app finds every stored response again. Serve runs
these sync methods in a thread pool; the backend is thread-safe.
"""

from __future__ import annotations

import logging
from typing import Any

from ray import serve

from agentserve.apis.responses.store import ResponseStore, StoredResponse
from agentserve.config import ServeArgs
from agentserve.state import open_backend

logger = logging.getLogger("ray.serve")


@serve.deployment(name="ResponseStore", num_replicas=1, max_ongoing_requests=4096, ray_actor_options={"num_cpus": 0})
class ResponseStoreReplica:
    """One replica is enough (the database holds the state); Serve restarts it if it dies."""

    def __init__(self, args: dict[str, Any]) -> None:
        config = ServeArgs.from_any(args)
        spec = config.response_store
        backend = open_backend(config.state)
        logger.info("Responses store on the %s state backend", config.state.backend)
        self._store = ResponseStore(
            max_entries=spec.max_entries, max_bytes=spec.max_bytes, ttl_s=spec.ttl_s, backend=backend
        )

    def put(self, response_id: str, entry: StoredResponse) -> bool:
        return self._store.put(response_id, entry)

    def get(self, response_id: str, owner: str) -> StoredResponse | None:
        return self._store.get(response_id, owner)

    def delete(self, response_id: str, owner: str) -> bool:
        return self._store.delete(response_id, owner)

    def __del__(self) -> None:
        store = getattr(self, "_store", None)
        if store is not None:
            store.close()
