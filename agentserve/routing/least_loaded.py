"""Least-loaded replica choice over the replicas that have checked in recently.

Replicas register when their engine is up and report every few seconds; one that stops
reporting is dropped, so a dead replica stops receiving traffic. In-flight counts are the
router's own (route .. release), so the choice needs no round trip to the replicas.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agentserve.protocol import RouteDecision, RouteRequest


@dataclass
class _Replica:
    in_flight: int = 0
    last_seen: float = field(default_factory=time.monotonic)


class LeastLoadedPolicy:
    def __init__(self, *, expire_after_s: float = 30.0, clock=time.monotonic) -> None:
        self._replicas: dict[str, _Replica] = {}
        self._assigned: dict[str, str] = {}  # request id -> replica id
        self._expire = expire_after_s
        self._clock = clock
        self._turn = 0

    def heartbeat(self, replica_id: str) -> None:
        rep = self._replicas.setdefault(replica_id, _Replica())
        rep.last_seen = self._clock()

    def remove(self, replica_id: str) -> None:
        self._replicas.pop(replica_id, None)

    def replicas(self) -> dict[str, int]:
        self._expire_stale()
        return {rid: r.in_flight for rid, r in self._replicas.items()}

    def _expire_stale(self) -> None:
        now = self._clock()
        for rid in [rid for rid, r in self._replicas.items() if now - r.last_seen > self._expire]:
            del self._replicas[rid]

    def route(self, request: RouteRequest) -> RouteDecision:
        self._expire_stale()
        if not self._replicas:
            return RouteDecision(replica_id=None, reason="no_replica")
        ids = sorted(self._replicas)
        # Rotate the starting point so ties spread instead of piling onto the first id.
        self._turn = (self._turn + 1) % len(ids)
        order = ids[self._turn :] + ids[: self._turn]
        best = min(order, key=lambda rid: self._replicas[rid].in_flight)
        self._replicas[best].in_flight += 1
        self._assigned[request.request_id] = best
        reason = "only_replica" if len(ids) == 1 else "least_loaded"
        return RouteDecision(replica_id=best, reason=reason)

    def release(self, request_id: str) -> None:
        rid = self._assigned.pop(request_id, None)
        rep = self._replicas.get(rid) if rid else None
        if rep is not None and rep.in_flight > 0:
            rep.in_flight -= 1
