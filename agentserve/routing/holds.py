"""Requests the Router holds back while replicas have room: since when, and the backlog they make per replica.

Two reasons to hold (routing/scheduling SchedulingConfig): `cache`, the request's best replica by the cost (its
cached prefix counted) is saturated and it waits for that one (`wait_for_cache`); `kv`, no replica has KV room for
it beside the sessions that keep their blocks (`kv_pressure`). Each hold is bounded in time (`max_cache_wait_s`,
`kv_max_defer_s`), counted from the request's first try. The prompt tokens of the requests waiting for a replica's
cache are that replica's hidden backlog: the cost adds it to the replica's pending prefill, as it would see them
in the engine's own queue had they been placed there, so a replica many sessions wait for stops looking cheap.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True)
class _Hold:
    since: float
    replica: str | None = None  # cache holds: the replica it waits for
    tokens: int = 0  # its uncached prompt tokens there


class Holds:
    def __init__(self, max_held: int) -> None:
        self._max = max_held
        self._held: OrderedDict[tuple[str, str], _Hold] = OrderedDict()
        self._backlog: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, request_id: str, why: str, now: float, replica: str | None = None, tokens: int = 0) -> float:
        """Hold `request_id` for `why` (waiting for `replica`, `tokens` to prefill there); returns since when."""
        key = (request_id, why)
        h = self._held.get(key)
        if h is None:
            h = self._held[key] = _Hold(now)
            if len(self._held) > self._max:  # those that left the queue unplaced without a word
                (rid, old_why), _ = next(iter(self._held.items()))
                self.drop(rid, old_why)
        self._count(h, -1)
        h.replica, h.tokens = replica, tokens
        self._count(h, +1)
        return h.since

    def waited(self, request_id: str, why: str, now: float) -> float:
        h = self._held.get((request_id, why))
        return 0.0 if h is None else now - h.since

    def backlog(self, replica: str, request_id: str = "") -> int:
        """Prompt tokens waiting for `replica`'s cache, `request_id`'s own aside."""
        h = self._held.get((request_id, "cache"))
        own = h.tokens if h is not None and h.replica == replica else 0
        return self._backlog.get(replica, 0) - own

    def drop(self, request_id: str, why: str | None = None) -> None:
        """The request was placed, turned away or gave up (every reason, or one)."""
        for w in (why,) if why is not None else ("cache", "kv"):
            h = self._held.pop((request_id, w), None)
            if h is not None:
                self._count(h, -1)

    def _count(self, h: _Hold, sign: int) -> None:
        if h.replica is None or not h.tokens:
            return
        left = self._backlog.get(h.replica, 0) + sign * h.tokens
        if left > 0:
            self._backlog[h.replica] = left
        else:
            self._backlog.pop(h.replica, None)
