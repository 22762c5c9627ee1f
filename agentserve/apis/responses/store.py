"""The bounded store behind `store: true`, `previous_response_id` and GET/DELETE /v1/responses/{id}.

Entries are scoped to an owner (a hash of the caller's API key): another key sees a 404, as if the
response did not exist. Bounded by entry count, total bytes and a TTL; the least recently used entry
goes first. Plain Python: `serve/response_store.py` runs one instance as a Ray Serve deployment so all
ingress replicas share it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import orjson


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._ttl = ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, tuple[StoredResponse, int, float]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def _drop(self, response_id: str) -> None:
        _, size, _ = self._entries.pop(response_id)
        self._bytes -= size

    def _expire(self) -> None:
        now = self._clock()
        while self._entries:
            oldest = next(iter(self._entries))
            if self._entries[oldest][2] > now:
                break
            self._drop(oldest)

    def put(self, response_id: str, entry: StoredResponse) -> bool:
        """Store an entry; False when it alone is larger than the whole store."""
        size = len(orjson.dumps(entry.response)) + len(orjson.dumps(entry.history))
        if size > self._max_bytes:
            return False
        if response_id in self._entries:
            self._drop(response_id)
        self._entries[response_id] = (entry, size, self._clock() + self._ttl)
        self._bytes += size
        self._expire()
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def get(self, response_id: str, owner: str) -> StoredResponse | None:
        self._expire()
        found = self._entries.get(response_id)
        if found is None or found[0].owner != owner:
            return None
        entry, size, _ = found
        # Reading refreshes recency (LRU) and lifetime, as a live session keeps using it.
        self._entries[response_id] = (entry, size, self._clock() + self._ttl)
        self._entries.move_to_end(response_id)
        return entry

    def delete(self, response_id: str, owner: str) -> bool:
        self._expire()
        found = self._entries.get(response_id)
        if found is None or found[0].owner != owner:
            return False
        self._drop(response_id)
        return True
