"""Active load per replica, from the router's own bookkeeping (no round trip to the engines).

A routed request adds its uncached prompt tokens to the replica's pending prefill until its first
token, and its KV blocks (prompt plus expected output: the `osl` hint, else a default) until release.

Each routed request is a lease with an expiry, not a counter: whoever serves it (the engine replica)
renews it while the request lives, and a lease nobody renews lapses. So an ingress that died, a client
that left between admission and the engine, or a lost release message cannot hold a slot for ever.

With several Router replicas each leases only what it routed; the requests a replica runs that another Router
leased count in its load too, as requests of the size this Router's own leases there have on average. They are
learnt from the engine's signals, which every Router receives: its first-token reports and its heartbeat's list of
what it runs add them, its end reports remove them at once (a count refreshed only by heartbeats would hold ended
requests for up to a heartbeat and push sessions off their replica).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    in_flight: int = 0
    prefill_tokens: int = 0  # uncached prompt tokens routed here and not yet prefilled
    active_blocks: float = 0.0  # KV blocks held by requests routed here and not yet released


@dataclass(slots=True)
class _Active:
    replica: str
    prefill_tokens: int
    blocks: float
    expires_at: float
    prefilled: bool = False


@dataclass
class _Totals:
    in_flight: int = 0
    prefill_tokens: int = 0
    active_blocks: float = 0.0
    requests: set[str] = field(default_factory=set)
    foreign: set[str] = field(default_factory=set)  # requests it runs that another Router replica leased


class LoadTracker:
    def __init__(self, foreign_blocks: float = 0.0) -> None:
        self._active: dict[str, _Active] = {}
        self._replicas: dict[str, _Totals] = {}
        self._foreign_blocks = foreign_blocks  # a foreign request's KV blocks where this Router has no lease to go by

    def add_replica(self, replica: str) -> None:
        self._replicas.setdefault(replica, _Totals())

    def remove_replica(self, replica: str) -> list[str]:
        """Forget a replica; returns the requests that were running on it."""
        t = self._replicas.pop(replica, None)
        if t is None:
            return []
        for rid in t.requests:
            self._active.pop(rid, None)
        return sorted(t.requests)

    def load(self, replica: str) -> ReplicaLoad:
        t = self._replicas.get(replica)
        if t is None:
            return ReplicaLoad()
        if not t.foreign:
            return ReplicaLoad(t.in_flight, t.prefill_tokens, t.active_blocks)
        each = t.active_blocks / t.in_flight if t.in_flight else self._foreign_blocks
        n = len(t.foreign)
        return ReplicaLoad(t.in_flight + n, t.prefill_tokens, t.active_blocks + n * each)

    def running(self, replica: str, request_ids: Iterable[str]) -> None:
        """What the replica runs now (its heartbeat): those this tracker did not lease are another Router's."""
        t = self._replicas.get(replica)
        if t is not None:
            t.foreign = {rid for rid in request_ids if rid not in t.requests}

    def foreign_started(self, replica: str, request_id: str) -> None:
        t = self._replicas.get(replica)
        if t is not None and request_id not in t.requests:
            t.foreign.add(request_id)

    def foreign_ended(self, replica: str, request_id: str) -> None:
        t = self._replicas.get(replica)
        if t is not None:
            t.foreign.discard(request_id)

    def replica_of(self, request_id: str) -> str | None:
        a = self._active.get(request_id)
        return a.replica if a else None

    def __len__(self) -> int:
        return len(self._active)

    def start(
        self, request_id: str, replica: str, prefill_tokens: int, blocks: float, expires_at: float = math.inf
    ) -> None:
        t = self._replicas.get(replica)
        if t is None or request_id in self._active:
            return
        self._active[request_id] = _Active(replica, prefill_tokens, blocks, expires_at)
        t.in_flight += 1
        t.prefill_tokens += prefill_tokens
        t.active_blocks += blocks
        t.requests.add(request_id)

    def first_token(self, request_id: str) -> None:
        a = self._active.get(request_id)
        if a is None or a.prefilled:
            return
        a.prefilled = True
        t = self._replicas.get(a.replica)
        if t is not None:
            t.prefill_tokens -= a.prefill_tokens

    def renew(self, request_ids: Iterable[str], expires_at: float) -> None:
        for rid in request_ids:
            a = self._active.get(rid)
            if a is not None:
                a.expires_at = expires_at

    def lapsed(self, now: float) -> list[str]:
        """Release every lease whose expiry passed; returns their request ids."""
        gone = [rid for rid, a in self._active.items() if a.expires_at <= now]
        for rid in gone:
            self.release(rid)
        return gone

    def release(self, request_id: str) -> str | None:
        self.first_token(request_id)
        a = self._active.pop(request_id, None)
        if a is None:
            return None
        t = self._replicas.get(a.replica)
        if t is not None:
            t.in_flight -= 1
            t.active_blocks -= a.blocks
            t.requests.discard(request_id)
        return a.replica
