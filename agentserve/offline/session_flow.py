"""When the router simulator's requests arrive, and what each session experienced: the workload side of its loop.

A turn arrives its gap after the previous turn's response ended in the simulation (never at a recorded time), so a
slow server delays a session's later turns as it would a real harness. Sessions from a trace also have subagents:
a subagent starts (its recorded offset) after the parent request that spawned it ends, and a parent turn that
waited for its subagents (a join) arrives its residual gap after the last of them ended. A shed request ends its
session; a parent waiting on that session goes on without it.

It also keeps what the trace benchmark reports: each request's sizes and times, and each program's (a top-level
session with its subagents) completion time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentserve.offline.router_sim import Request, Session

Arrival = tuple[float, "Session", int]  # (time, session, turn index)


@dataclass(frozen=True, slots=True)
class Served:
    """One request as the simulation saw it (shed: never served; its ttft and end are its arrival)."""

    session: int
    turn: int  # the request's index in its session
    kind: str
    arrival: float
    ttft: float
    end: float
    prompt_tokens: int
    cached_tokens: int
    reusable_tokens: int  # what one shared unbounded cache would have held of the prompt
    output_tokens: int
    shed: bool


@dataclass(frozen=True, slots=True)
class Program:
    """A top-level session with its subagents: from its first arrival to the last response of any of them."""

    root: int
    turns: int  # the top-level session's requests
    start: float
    end: float
    complete: bool  # no request of it was shed


class SessionFlow:
    def __init__(self, sessions: list[Session], block_size: int) -> None:
        self._bs = block_size
        self._by_id = {s.sid: s for s in sessions}
        self._roots = {s.sid: self._root(s) for s in sessions}
        self._waiting: dict[tuple[int, int], int] = {}  # (parent, turn) -> subagents still running
        self._ready: dict[tuple[int, int], float] = {}  # (parent, turn) -> the latest end so far
        self._open: dict[int, int] = {}  # root -> sessions of the program not ended
        self._start: dict[int, float] = {}
        self._end: dict[int, float] = {}
        self._shed: set[int] = set()
        self._reusable: dict[int, int] = {}  # request id -> reusable tokens, while it is in flight
        self._written: set[int] = set()  # every block of any earlier prompt or finished output
        self.requests: list[Served] = []
        self.t0 = min((s.start_s for s in sessions if s.parent is None), default=0.0)

    def _root(self, s: Session) -> int:
        seen = 0
        while s.parent is not None and s.parent in self._by_id and seen < 64:
            s, seen = self._by_id[s.parent], seen + 1
        return s.sid

    def starts(self) -> list[Arrival]:
        """Every top-level session's first turn; subagents start from their parents' ends."""
        out = []
        for s in self._by_id.values():
            if s.parent is None or s.parent not in self._by_id:
                out.append((s.start_s, s, 0))
                self._session_opened(s)
        return out

    def arrived(self, req: Request, now: float) -> None:
        """Also what of its prompt one shared unbounded cache would hold: its leading blocks any earlier request
        brought (prompt on arrival, output on its end: vLLM caches both)."""
        root = self._roots[req.session.sid]
        self._start[root] = min(self._start.get(root, now), now)
        hit = 0
        for h in req.blocks[: max(0, (req.prompt_tokens - 1) // self._bs)]:
            if h not in self._written:
                break
            hit += 1
        self._reusable[req.rid] = hit * self._bs
        self._written.update(req.blocks)

    def shed(self, req: Request, now: float) -> list[Arrival]:
        self._record(req, now, now, shed=True)
        self._shed.add(self._roots[req.session.sid])
        return self._session_ended(req.session, now)

    def ended(self, req: Request, now: float) -> list[Arrival]:
        self._record(req, req.arrival + req.ttft, now, shed=False)
        s, k = req.session, req.turn
        written = s.turns[k].written
        self._written.update(written if written is not None else s.blocks[: (req.prompt_tokens + req.output_tokens) // self._bs])
        out: list[Arrival] = []
        for child in s.spawns.get(k, ()):
            c = self._by_id[child]
            self._session_opened(c)
            out.append((now + c.start_s, c, 0))
        if k + 1 >= len(s.turns):
            return out + self._session_ended(s, now)
        joined = s.joins.get(k + 1)
        if joined:
            self._waiting[(s.sid, k + 1)] = len(joined[0])
            self._ready[(s.sid, k + 1)] = now
        else:
            out.append((now + s.turns[k].gap_s, s, k + 1))
        return out

    def programs(self) -> list[Program]:
        out = []
        for sid, s in self._by_id.items():
            if self._roots[sid] != sid or sid not in self._start:
                continue
            out.append(Program(sid, len(s.turns), self._start[sid], self._end.get(sid, self._start[sid]),
                               sid not in self._shed and self._open.get(sid, 0) == 0))
        return out

    def _record(self, req: Request, first: float, end: float, *, shed: bool) -> None:
        turn = req.session.turns[req.turn]
        self.requests.append(Served(
            req.session.sid, req.turn, turn.kind, req.arrival, first, end, req.prompt_tokens, req.cached_tokens,
            self._reusable.pop(req.rid, 0), 0 if shed else req.output_tokens, shed,
        ))
        root = self._roots[req.session.sid]
        self._end[root] = max(self._end.get(root, end), end)

    def _session_opened(self, s: Session) -> None:
        root = self._roots[s.sid]
        self._open[root] = self._open.get(root, 0) + 1

    def _session_ended(self, s: Session, now: float) -> list[Arrival]:
        root = self._roots[s.sid]
        self._open[root] = self._open.get(root, 1) - 1
        if s.parent is None or s.parent not in self._by_id:
            return []
        parent = self._by_id[s.parent]
        for (p, j), left in list(self._waiting.items()):
            if p != parent.sid or s.sid not in parent.joins[j][0]:
                continue
            self._ready[(p, j)] = max(self._ready[(p, j)], now)
            if left > 1:
                self._waiting[(p, j)] = left - 1
                return []
            del self._waiting[(p, j)]
            return [(self._ready.pop((p, j)) + parent.joins[j][1], parent, j)]
        return []
