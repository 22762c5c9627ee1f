"""KV-pressure awareness: which sessions between turns keep their KV blocks on a replica, and what may be admitted.

An agent session spends most of its life in tool gaps, holding its context's KV blocks on the replica of its last
turn. When the sessions a replica carries outgrow its KV pool, the engine's LRU evicts whichever were idle
longest, new work keeps arriving, and returning sessions re-prefill 100K-token contexts in turn (thrash).
ThunderAgent (Dynamo) instead pauses programs in a tool call when the pool is full and resumes them as room frees.

This tracker does that at the Router, from what it already knows: each replica's KV capacity (engine
registration: vLLM's num_gpu_blocks), the blocks of the requests it leased, and each session's context (its last
request's blocks beyond the shared prefix it started from). Per replica, the idle sessions that fit under
`high_watermark` x capacity, most recently active first, keep their blocks ("kept"); an idle session beyond the
budget or idle longer than `keep_gap_s` is given up. The Router then
- admits a request to a replica only if its context fits beside the running requests and the kept sessions,
  unless it is the returning session itself (its blocks are there) or the replica runs nothing;
- defers the request (it waits in admission, in its rank) when no replica has room; and
- places a given-up session whose blocks are gone like a new one, on a replica with room.

vLLM 0.32 has no per-request eviction priority for its GPU prefix cache (BlockPool frees cached blocks in LRU
order; the KvHintsEnvelope it carries reaches only the KVCR offloading connector), so giving up follows LRU order
(the longest-idle first): what the Router believes is resident stays what the engine keeps. `kept` is what an
engine hook would protect (the simulator's hinted replicas do).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass(slots=True)
class _Session:
    replica: str
    own_blocks: float  # its context beyond the shared prefix it started from
    base_blocks: float  # that shared prefix (cached for it at its first turn)
    active: int = 0
    idle_since: float = 0.0


@dataclass(slots=True)
class _Replica:
    capacity: float | None = None
    active_blocks: float = 0.0  # own blocks of the requests running there
    idle: OrderedDict[str, None] = field(default_factory=OrderedDict)  # sessions in a gap, oldest first


class KvPressure:
    def __init__(self, *, high_watermark: float, keep_gap_s: float, max_sessions: int) -> None:
        self._high = high_watermark
        self._keep_gap = keep_gap_s
        self._max = max_sessions
        self._replicas: dict[str, _Replica] = {}
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._requests: dict[str, tuple[str, str, float]] = {}  # request -> (replica, session, own blocks)

    # -- membership ---------------------------------------------------------------
    def set_capacity(self, replica: str, blocks: int | None) -> None:
        self._replicas.setdefault(replica, _Replica()).capacity = float(blocks) if blocks else None

    def forget_replica(self, replica: str) -> None:
        rep = self._replicas.pop(replica, None)
        if rep is None:
            return
        for s in [k for k, v in self._sessions.items() if v.replica == replica]:
            del self._sessions[s]
        self._requests = {r: v for r, v in self._requests.items() if v[0] != replica}

    # -- requests -------------------------------------------------------------------
    def own_blocks(self, session: str, blocks: float, overlap: int) -> float:
        """A request's context beyond the shared prefix: its session's, or (a first turn, no session) what is
        not cached yet."""
        s = self._sessions.get(session) if session else None
        return max(0.0, blocks - (s.base_blocks if s is not None else overlap))

    def started(self, request_id: str, session: str, replica: str, blocks: float, overlap: int) -> None:
        if request_id in self._requests:
            return
        own = self.own_blocks(session, blocks, overlap)
        rep = self._replicas.setdefault(replica, _Replica())
        rep.active_blocks += own
        self._requests[request_id] = (replica, session, own)
        if not session:
            return
        s = self._sessions.get(session)
        if s is None:
            s = self._sessions[session] = _Session(replica, own, float(overlap))
            if len(self._sessions) > self._max:
                old, gone = self._sessions.popitem(last=False)
                self._replicas.get(gone.replica, _Replica()).idle.pop(old, None)
        else:
            self._sessions.move_to_end(session)
            self._idle_of(s).pop(session, None)
            s.replica, s.own_blocks = replica, own
        s.active += 1

    def ended(self, request_id: str, now: float) -> None:
        entry = self._requests.pop(request_id, None)
        if entry is None:
            return
        replica, session, own = entry
        rep = self._replicas.get(replica)
        if rep is not None:
            rep.active_blocks = max(0.0, rep.active_blocks - own)
        s = self._sessions.get(session) if session else None
        if s is None or s.replica != replica:
            return
        s.active = max(0, s.active - 1)
        if s.active == 0 and rep is not None:
            s.idle_since = now
            rep.idle[session] = None
            rep.idle.move_to_end(session)

    # -- decisions ------------------------------------------------------------------
    def kept(self, replica: str, now: float) -> dict[str, float]:
        """The idle sessions on `replica` that keep their blocks, with their own blocks: the most recently active
        first, within the tool-gap horizon, while they fit beside the running requests (all of them when the
        replica's capacity is unknown)."""
        rep = self._replicas.get(replica)
        if rep is None:
            return {}
        budget = self._high * rep.capacity - rep.active_blocks if rep.capacity is not None else float("inf")
        out: dict[str, float] = {}
        for session in reversed(rep.idle):
            s = self._sessions[session]
            if now - s.idle_since > self._keep_gap or s.own_blocks > budget:
                break  # older ones were idle longer: LRU order, as the engine evicts
            budget -= s.own_blocks
            out[session] = s.own_blocks
        return out

    def holds(self, session: str, replica: str, now: float) -> bool:
        """The session runs on `replica`, or waits there in a gap with its blocks kept."""
        s = self._sessions.get(session) if session else None
        if s is None or s.replica != replica:
            return False
        return s.active > 0 or session in self.kept(replica, now)

    def gave_up(self, session: str, now: float) -> bool:
        """The session's home no longer keeps its blocks for it (it is placed like a new one)."""
        s = self._sessions.get(session) if session else None
        return s is not None and s.active == 0 and not self.holds(session, s.replica, now)

    def admits(self, replica: str, session: str, own_blocks: float, in_flight: int, now: float) -> bool:
        rep = self._replicas.get(replica)
        if rep is None or rep.capacity is None or in_flight == 0 or self.holds(session, replica, now):
            return True
        kept = sum(self.kept(replica, now).values())
        return rep.active_blocks + kept + own_blocks <= self._high * rep.capacity

    def used(self, replica: str, now: float) -> tuple[float, float, float | None]:
        """(running requests' own blocks, kept idle sessions' blocks, capacity) of one replica."""
        rep = self._replicas.get(replica, _Replica())
        return rep.active_blocks, sum(self.kept(replica, now).values()), rep.capacity

    def _idle_of(self, s: _Session) -> OrderedDict[str, None]:
        return self._replicas.setdefault(s.replica, _Replica()).idle
