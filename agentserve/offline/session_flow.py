"""When the router simulator's requests arrive, and what each session experienced: the workload side of its loop.

A turn arrives its gap after the previous turn's response ended in the simulation (never at a recorded time), so a
slow server delays a session's later turns as it would a real harness. Sessions from a trace also have subagents:
a subagent starts (its recorded offset) after the parent request that spawned it ends, and a parent turn that
waited for its subagents (a join) arrives its residual gap after the last of them ended.

A shed request (a 529 before any byte) is retried as the harnesses do (`RetryPolicy`): the same turn arrives
again after the response's `retry-after` (the Router sends 2 s: router.retry_after_s), or after an exponential
backoff where none is given, up to `max_retries` times; only then does it end its session, and a parent waiting on
that session goes on without it. What the harnesses do, as far as documented:

* Anthropic's and OpenAI's Python SDKs retry 408/409/429 and 5xx (529 included) `max_retries` = 2 times by
  default, waiting the `retry-after` (`retry-after-ms`) the response gives when it is 0-60 s, else
  min(0.5 s x 2^n, 8 s) less up to 25% jitter (anthropic-sdk-python `_constants.py`: DEFAULT_MAX_RETRIES = 2,
  INITIAL_RETRY_DELAY = 0.5, MAX_RETRY_DELAY = 8.0; `_base_client._calculate_retry_timeout`).
* Claude Code retries an API error up to 10 times by default (`CLAUDE_CODE_MAX_RETRIES`; its error reference,
  "automatic retries"), honouring `retry-after`, else backing off exponentially from 500 ms. Descriptions of its
  internals also mention a lower cap on *consecutive* 529s for foreground requests (3, then a fallback model)
  and no 529 retry for background ones; that is not in its documentation and is not modelled.

The default here is Claude Code's: 10 retries, `retry-after` 2 s.

It also keeps what the trace benchmark reports: each request's sizes and times, and each program's (a top-level
session with its subagents) completion time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentserve.offline.router_sim import Request, Session

Arrival = tuple[float, "Session", int]  # (time, session, turn index)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a harness retries a 529 (module docstring): `max_retries` more attempts, each after `retry_after_s`
    (the response's header) or, with None, after min(base_s x 2^n, max_s) less up to `jitter` of it."""

    max_retries: int = 10  # Claude Code's default; the Anthropic and OpenAI SDKs': 2
    retry_after_s: float | None = 2.0  # the Router's retry-after (router.retry_after_s)
    base_s: float = 0.5
    max_s: float = 8.0
    jitter: float = 0.25
    seed: int = 0  # of the jitter (each SessionFlow draws from its own generator)

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds before retry number `retry` (1 = the first)."""
        if self.retry_after_s is not None:
            return self.retry_after_s
        return min(self.base_s * 2 ** (retry - 1), self.max_s) * (1 - self.jitter * rng.random())


NO_RETRY = RetryPolicy(max_retries=0)  # a shed request ends its session (the simulator before retries)


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
    attempt: int = 0  # 0: the first; n: the n-th retry of a shed request
    first_arrival: float | None = None  # the first attempt's arrival (what the harness waited from)
    retried: bool = False  # shed, and retried later
    preemptions: int = 0  # times the engine preempted it (recompute)
    recomputed_tokens: int = 0  # KV tokens it lost to preemption and prefilled again


@dataclass(frozen=True, slots=True)
class Program:
    """A top-level session with its subagents: from its first arrival to the last response of any of them."""

    root: int
    turns: int  # the top-level session's requests
    start: float
    end: float
    complete: bool  # no request of it was shed


class SessionFlow:
    def __init__(self, sessions: list[Session], block_size: int, retry: RetryPolicy | None = None) -> None:
        self._bs = block_size
        self.retry = retry if retry is not None else RetryPolicy()
        self._rng = random.Random(self.retry.seed)
        self._attempts: dict[tuple[int, int], tuple[int, float]] = {}  # (session, turn) -> (retries so far, first arrival)
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
        """A 529: the turn again after the backoff, or (retries spent) the end of its session."""
        key = (req.session.sid, req.turn)
        n, first = self._attempts.get(key, (0, req.arrival))
        if n < self.retry.max_retries:
            self._record(req, now, now, shed=True, retried=True)
            self._attempts[key] = (n + 1, first)
            return [(now + self.retry.delay(n + 1, self._rng), req.session, req.turn)]
        self._record(req, now, now, shed=True)
        self._attempts.pop(key, None)
        self._shed.add(self._roots[req.session.sid])
        return self._session_ended(req.session, now)

    def ended(self, req: Request, now: float) -> list[Arrival]:
        self._record(req, req.arrival + req.ttft, now, shed=False)
        self._attempts.pop((req.session.sid, req.turn), None)
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

    def _record(self, req: Request, first: float, end: float, *, shed: bool, retried: bool = False) -> None:
        turn = req.session.turns[req.turn]
        attempt, first_arrival = self._attempts.get((req.session.sid, req.turn), (0, req.arrival))
        self.requests.append(Served(
            req.session.sid, req.turn, turn.kind, req.arrival, first, end, req.prompt_tokens, req.cached_tokens,
            self._reusable.pop(req.rid, 0), 0 if shed else req.output_tokens, shed, attempt, first_arrival, retried,
            getattr(req, "preemptions", 0), getattr(req, "recomputed_tokens", 0),
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
