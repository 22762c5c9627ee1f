"""Requests the Router holds back while replicas have room, and since when (each hold is bounded in time).

Two reasons to hold (routing/scheduling SchedulingConfig): `cache`, the request's best replica by the cost (its
cached prefix counted) is saturated and it waits for that one (`wait_for_cache`, at most `max_cache_wait_s`);
`kv`, no replica has KV room for it beside the sessions that keep their blocks (`kv_pressure`, at most
`kv_max_defer_s`). A hold counts from the request's first try and ends when it is placed or leaves the queue.

The requests waiting for a replica are deliberately not added to its pending prefill in the cost: measured on the
simulator (docs/BENCHMARKS.md, session-aware scheduling), doing so sent waiting sessions to cold replicas and cut
the cached share from 88% to 72%.
"""

from __future__ import annotations

from collections import OrderedDict


class Holds:
    def __init__(self, max_held: int) -> None:
        self._max = max_held
        self._since: OrderedDict[tuple[str, str], float] = OrderedDict()  # (request, why) -> first held

    def __len__(self) -> int:
        return len(self._since)

    def hold(self, request_id: str, why: str, now: float) -> float:
        """Hold `request_id` for `why`; returns since when it is held."""
        key = (request_id, why)
        since = self._since.get(key)
        if since is None:
            since = self._since[key] = now
            if len(self._since) > self._max:  # those that left the queue unplaced without a word
                self._since.popitem(last=False)
        return since

    def waited(self, request_id: str, why: str, now: float) -> float:
        since = self._since.get((request_id, why))
        return 0.0 if since is None else now - since

    def drop(self, request_id: str) -> None:
        """The request was placed, turned away or left."""
        self._since.pop((request_id, "cache"), None)
        self._since.pop((request_id, "kv"), None)
