"""Approximate prefix index for engines without KV events: learn from our own routing decisions.

A routed prompt's blocks are assumed cached on its replica for `ttl_s` (refreshed when routed again)
and each replica keeps at most `max_blocks`; over the cap the least recently routed go first, the
tail of a prompt before its head (as vLLM frees a finished request's blocks tail first).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable

from agentserve.routing.index import PrefixIndex


class ApproxIndex:
    def __init__(
        self, *, ttl_s: float = 120.0, max_blocks: int = 1 << 20, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.index = PrefixIndex()
        self._ttl = ttl_s
        self._cap = max_blocks
        self._clock = clock
        self._seen: dict[str, OrderedDict[int, float]] = {}  # replica -> hash -> expiry, oldest first

    def add_replica(self, replica: str) -> None:
        self.index.add_replica(replica)
        self._seen.setdefault(replica, OrderedDict())

    def remove_replica(self, replica: str) -> None:
        self.index.remove_replica(replica)
        self._seen.pop(replica, None)

    def clear(self, replica: str) -> None:
        if replica in self._seen:
            self.index.clear(replica)
            self._seen[replica] = OrderedDict()

    def learn(self, replica: str, hashes: list[int]) -> None:
        seen = self._seen.get(replica)
        if seen is None:
            return
        expiry = self._clock() + self._ttl
        new = []
        for h in reversed(hashes):  # the head ends most recent: the tail is evicted first
            if h in seen:
                seen.move_to_end(h)
            else:
                new.append(h)
            seen[h] = expiry
        self.index.add(replica, new)
        if len(seen) > self._cap:
            drop = [seen.popitem(last=False)[0] for _ in range(len(seen) - int(self._cap * 0.8))]
            self.index.remove(replica, drop)

    def expire(self) -> None:
        now = self._clock()
        for replica, seen in self._seen.items():
            drop = []
            # Expiries are not monotone in LRU order only when a TTL changes; a scan of the stale head is enough.
            while seen:
                h, exp = next(iter(seen.items()))
                if exp > now:
                    break
                seen.popitem(last=False)
                drop.append(h)
            if drop:
                self.index.remove(replica, drop)

    def overlaps(self, hashes: list[int]) -> dict[str, int]:
        self.expire()
        return self.index.overlaps(hashes)
