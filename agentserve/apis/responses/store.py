"""The store behind `store: true`, `previous_response_id` and GET/DELETE /v1/responses/{id}.

Entries are scoped to an owner (a hash of the caller's API key): another key sees a 404, as if the response did
not exist. Each owner has a quota, and a full store evicts from the owner holding the most first
(state/sql.py), so one key cannot push out another's `previous_response_id` chains. It keeps the Responses shapes; the bytes live in a state backend (agentserve/state: a SQLite file by
default, PostgreSQL in clusters), which enforces the entry, byte and TTL caps, so stored responses and
`previous_response_id` chains survive restarts and redeploys. Each Ingress replica opens one over the configured
backend. Calls block on the database: run them off the event loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import orjson

from agentserve.state import StateBackend, StoreBounds


@dataclass(frozen=True, slots=True)
class StoredResponse:
    owner: str
    response: dict[str, Any]  # the Response object as the client saw it
    history: list[dict[str, Any]]  # input items then output items (reasoning sealed): what a follow-up replays


class ResponseStore:
    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.time,  # wall clock: entries outlive this process
        backend: StateBackend | None = None,  # None: an in-memory SQLite database (this process only)
        max_entries_per_owner: int | None = None,  # one owner's quota (None: the store's caps)
        max_bytes_per_owner: int | None = None,
    ) -> None:
        if backend is None:
            from agentserve.state.sqlite import SQLiteBackend

            backend = SQLiteBackend(":memory:")
        self._backend = backend
        self._bounds = StoreBounds(
            max_entries=max_entries, max_bytes=max_bytes, ttl_s=ttl_s,
            max_entries_per_owner=max_entries_per_owner, max_bytes_per_owner=max_bytes_per_owner,
        )
        self._clock = clock

    def __len__(self) -> int:
        return self._backend.response_stats(self._clock())[0]

    @property
    def bytes(self) -> int:
        return self._backend.response_stats(self._clock())[1]

    def put(self, response_id: str, entry: StoredResponse) -> bool:
        """Store an entry; False when it alone is larger than the whole store."""
        body = orjson.dumps({"response": entry.response, "history": entry.history})
        return self._backend.put_response(response_id, entry.owner, body, self._clock(), self._bounds)

    def get(self, response_id: str, owner: str) -> StoredResponse | None:
        # Reading refreshes recency (LRU) and lifetime, as a live session keeps using it.
        body = self._backend.get_response(response_id, owner, self._clock(), self._bounds.ttl_s)
        if body is None:
            return None
        data = orjson.loads(body)
        return StoredResponse(owner=owner, response=data["response"], history=data["history"])

    def delete(self, response_id: str, owner: str) -> bool:
        return self._backend.delete_response(response_id, owner, self._clock())

    def close(self) -> None:
        self._backend.close()
