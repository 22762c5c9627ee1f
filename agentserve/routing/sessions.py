"""Which replica each agent session last ran on, and how many sessions each replica is carrying now.

A session between two turns (the harness running a tool) has no request in flight, so a replica's load says
nothing about the turns its sessions will send next; what it is carrying is the sessions it served recently.
The router spreads *new* sessions by that count (`CostConfig.session_spread`): without it, every new session
that shares a popular system prompt lands on the few replicas that cache it, and the work of all their later
turns follows (docs/BENCHMARKS.md, "Router: simulated multi-turn agent sessions").

Both maps are ordered by last use, so expiring residents and evicting the oldest sessions are O(1) each.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class _Seen:
    replica: str
    at: float


class SessionTable:
    def __init__(self, *, resident_s: float, max_sessions: int) -> None:
        self._resident_s = resident_s
        self._max = max_sessions
        self._last: OrderedDict[str, str] = OrderedDict()  # session -> replica of its last turn
        self._recent: OrderedDict[str, _Seen] = OrderedDict()  # sessions seen within resident_s
        self._resident: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._last)

    def replica_of(self, session: str) -> str | None:
        return self._last.get(session)

    def touch(self, session: str, replica: str, now: float) -> None:
        """The session's request was routed to `replica` at `now` (monotonic)."""
        self._last[session] = replica
        self._last.move_to_end(session)
        if len(self._last) > self._max:
            self._last.popitem(last=False)
        seen = self._recent.pop(session, None)
        if seen is not None:
            self._resident[seen.replica] -= 1
        self._recent[session] = _Seen(replica, now)
        self._resident[replica] += 1

    def resident(self, now: float) -> Counter[str]:
        """Sessions per replica whose last turn was routed within `resident_s` of `now` (a live view)."""
        horizon = now - self._resident_s
        while self._recent:
            session, seen = next(iter(self._recent.items()))
            if seen.at > horizon:
                break
            del self._recent[session]
            self._resident[seen.replica] -= 1
        return self._resident

    def forget_replica(self, replica: str) -> None:
        """The replica left: its sessions have no home (their next turn is routed as new)."""
        for session in [s for s, r in self._last.items() if r == replica]:
            del self._last[session]
        for session in [s for s, seen in self._recent.items() if seen.replica == replica]:
            del self._recent[session]
        self._resident.pop(replica, None)
