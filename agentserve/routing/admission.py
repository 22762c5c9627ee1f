"""Admission: when every replica is saturated, wait in rank order, bounded in length and time.

The order is FCFS by default, as Dynamo's fcfs policy: `arrival - priority_jump`, so a priority (or
latency_sensitivity) of p seconds lets a request overtake those that arrived up to p seconds earlier. Rank terms
(routing/scheduling: per-key shares, interactive first, least attained service per session) go before that key
when enabled; terms whose value changes while a request waits are re-read whenever the queue admits.

Rank terms order only requests that have waited `rank_after_s` (by the FCFS key: `now - (arrival - jump) >=
rank_after_s`, a priority jump counting as time waited); younger ones keep FCFS order behind them. Those that have
waited are exactly a prefix of the FCFS order (their FCFS key is at most `now - rank_after_s`, every younger one's
above it), so the whole order is FCFS with its head re-ordered by rank: a lightly loaded queue, whose waits are
short, stays FCFS; a backlog is ranked. Young tickets sit in a heap keyed by (FCFS key, sequence), a key that never
changes; `_promote` moves those that crossed the threshold, always a prefix of that heap, to the ranked
structure, each ticket once, at the start of a pump (the only place the order is read). Every structure's keys are
thus fixed while a ticket is in it and crossing is one way (time only runs forward), so each is a consistent heap
or list, and promotion costs O(log n) once per ticket. `rank_after_s <= 0` ranks every waiter at once.

A request never waits forever: a full queue or a wait past `max_wait_s` is rejected with a retry hint, which the
APIs render as 529 (Anthropic) / 503 with `Retry-After` before any byte. With a rank term on, a full queue rejects
its lowest-ranked waiter rather than a newcomer that ranks above it (`shed_lowest`), by rank whatever the waits (a
full queue is saturation; by FCFS the newcomer would always be the one turned away).

Two ways in: `wait` (asyncio, the Router deployment) and `offer` with callbacks plus `expire` (the simulator's
virtual clock). `pump`'s admit function may return a `Deferred`: this waiter cannot go now, try the next; one
deferred for a given replica (it waits for that replica's cache) is passed over without being placed again while
that replica stays saturated, so a pump costs one placement per waiter that might go.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Final, Generic, Sequence, TypeVar

from agentserve.protocol.errors import RequestError
from agentserve.routing.scheduling.base import RankTerm, Waiting

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Deferred:
    """Not now: `replica` is the saturated replica it waits for (None: no replica has room for it), until `until`
    (then it is placed again whatever that replica's state)."""

    replica: str | None = None
    until: float = float("inf")


DEFER: Final = Deferred()
MAX_DEFERRED = 32  # waiters placed and deferred per pump before it stops looking (bounds a pump's work)


@dataclass(slots=True, eq=False)
class Ticket:
    w: Waiting
    resolve: Callable[[Any], None]
    reject: Callable[[RequestError], None]
    deadline: float
    done: bool = False
    future: asyncio.Future | None = None  # `wait`'s: a cancelled caller is skipped
    blocked_on: str | None = None  # the saturated replica it was last deferred for
    blocked_until: float = 0.0
    ranked: bool = True  # in the ranked structure (False: still young, in FCFS order)

    @property
    def live(self) -> bool:
        return not self.done and (self.future is None or not self.future.done())


class AdmissionQueue(Generic[T]):
    def __init__(
        self, *, max_waiting: int, max_wait_s: float, retry_after_s: float, clock: Callable[[], float],
        terms: Sequence[RankTerm] = (), shed_lowest: bool = True, on_drop: Callable[[Any], None] | None = None,
        rank_after_s: float = 0.0,
    ) -> None:  # fmt: skip
        self._on_drop = on_drop  # told of every item that leaves unadmitted (turned away, timed out, cancelled)
        self._terms = tuple(terms)
        self._dynamic = any(t.dynamic for t in self._terms)
        self._heap: list[tuple[tuple, Ticket]] = []  # static order: ranked once, on arrival
        self._list: list[Ticket] = []  # dynamic order: ranked at each admission
        # Without terms the rank is the FCFS key: ranking at once is the same order.
        self._rank_after = rank_after_s if self._terms else 0.0
        self._young: list[tuple[float, int, Ticket]] = []  # (FCFS key, seq): not yet ranked (rank_after_s > 0)
        self._seq = itertools.count()
        self._max_waiting = max_waiting
        self._max_wait = max_wait_s
        self._retry_after = retry_after_s
        self._clock = clock
        self._shed_lowest = shed_lowest and bool(self._terms)
        self._waiting = 0  # tickets not finished (a caller cancelled a moment ago may still count)
        self.rejected = 0

    def __len__(self) -> int:
        return self._waiting

    def overloaded(self, why: str) -> RequestError:
        self.rejected += 1
        return RequestError(
            "overloaded",
            f"all engine replicas are saturated ({why}); retry after {self._retry_after:g}s",
            code="overloaded",
            retry_after=self._retry_after,
        )

    def rank(self, w: Waiting, now: float) -> tuple:
        return (*(t.value(w, now) for t in self._terms), w.arrival - w.jump, w.seq)

    # -- entering ------------------------------------------------------------------
    def offer(
        self, item: Any, priority_jump: float, resolve: Callable[[T], None], reject: Callable[[RequestError], None]
    ) -> Ticket:
        """Queue `item`; `resolve` gets its result from `pump`, `reject` an overloaded error (a lower-ranked
        newcomer displaced it, or `expire`). Raises RequestError('overloaded') when the queue is full."""
        now = self._clock()
        ticket = Ticket(Waiting(item, now, priority_jump, next(self._seq)), resolve, reject, now + self._max_wait)
        if len(self) >= self._max_waiting and not self._displace_for(ticket, now):
            if self._on_drop is not None:
                self._on_drop(item)
            raise self.overloaded(f"{self._max_waiting} requests already waiting")
        if self._rank_after > 0:
            ticket.ranked = False
            heapq.heappush(self._young, (ticket.w.arrival - ticket.w.jump, ticket.w.seq, ticket))
        elif self._dynamic:
            self._list.append(ticket)
        else:
            heapq.heappush(self._heap, (self.rank(ticket.w, now), ticket))
        self._waiting += 1
        return ticket

    async def wait(self, item: Any, priority_jump: float) -> T:
        """Wait until `pump` hands this item a result; raises RequestError('overloaded') instead of hanging."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        ticket = self.offer(item, priority_jump, fut.set_result, fut.set_exception)
        ticket.future = fut
        try:
            return await asyncio.wait_for(fut, self._max_wait)
        except asyncio.TimeoutError:
            raise self.overloaded(f"waited {self._max_wait:g}s for capacity") from None
        finally:
            self._finish(ticket)

    def _displace_for(self, newcomer: Ticket, now: float) -> bool:
        """Full queue: reject the lowest-ranked waiter if the newcomer ranks above it (shed_lowest only)."""
        if not self._shed_lowest:
            return False
        live = [t for t in self._tickets() if t.live]
        if not live:
            return True
        worst = max(live, key=lambda t: self.rank(t.w, now))
        if self.rank(worst.w, now) <= self.rank(newcomer.w, now):
            return False
        self._finish(worst)
        worst.reject(self.overloaded("displaced by a higher-ranked request"))
        return True

    # -- leaving ---------------------------------------------------------------------
    def pump(self, try_admit: Callable[[Any], T | None | Deferred], is_open: Callable[[str], bool] | None = None) -> int:
        """Admit waiters in order (those past `rank_after_s` by rank, then the rest FCFS) while `try_admit` finds
        room (None: no room for anyone; a Deferred: not for this one, try the next); `is_open(replica)`: whether a
        replica a waiter was deferred for has room now (a waiter whose replica is still full is passed over
        unplaced). Returns how many were admitted."""
        admitted = 0
        passed: list[Ticket] = []
        placed_in_vain = 0
        now = self._clock()
        self._promote(now)
        ranked = _Ranked(self, now) if self._dynamic else None
        while placed_in_vain < MAX_DEFERRED:
            ticket = ranked.pop() if ranked is not None else self._pop_best(now)
            if ticket is None:
                ticket = self._pop_young()
            if ticket is None:
                break
            blocked = ticket.blocked_on is not None and now < ticket.blocked_until
            if blocked and is_open is not None and not is_open(ticket.blocked_on):  # type: ignore[arg-type]
                passed.append(ticket)
                continue
            result = try_admit(ticket.w.req)
            if result is None:
                passed.append(ticket)
                break
            if isinstance(result, Deferred):
                ticket.blocked_on, ticket.blocked_until = result.replica, result.until
                passed.append(ticket)
                placed_in_vain += 1
                continue
            self._finish(ticket, admitted=True)
            if ranked is not None:
                ranked.charged(ticket)
            ticket.resolve(result)
            admitted += 1
        if ranked is not None:
            passed.extend(ranked.rest())
        for ticket in passed:
            self._put_back(ticket, now)
        return admitted

    def expire(self) -> int:
        """Reject every waiter past `max_wait_s` (the simulator's clock; `wait` times out by itself)."""
        if not self._waiting:
            return 0
        now = self._clock()
        late = [t for t in self._tickets() if t.live and t.deadline <= now]
        for t in late:
            self._finish(t)
            t.reject(self.overloaded(f"waited {self._max_wait:g}s for capacity"))
        return len(late)

    # -- internals -------------------------------------------------------------------
    def _tickets(self) -> list[Ticket]:
        ranked = self._list if self._dynamic else [t for _, t in self._heap]
        return [*ranked, *(t for _, _, t in self._young)] if self._young else ranked

    def _finish(self, ticket: Ticket, admitted: bool = False) -> None:
        if ticket.done:
            return
        ticket.done = True
        self._waiting -= 1
        if not admitted and self._on_drop is not None:
            self._on_drop(ticket.w.req)
        if self._dynamic and ticket.ranked:
            try:
                self._list.remove(ticket)
            except ValueError:
                pass
        # heap entries (ranked or young) of finished tickets are dropped when they reach the top

    def _promote(self, now: float) -> None:
        """Move the young tickets that have waited `rank_after_s` (a prefix of the young heap) to the ranked order."""
        edge = now - self._rank_after
        young = self._young
        while young and young[0][0] <= edge:
            _, _, ticket = heapq.heappop(young)
            if not ticket.live:
                continue
            ticket.ranked = True
            if self._dynamic:
                self._list.append(ticket)
            else:
                heapq.heappush(self._heap, (self.rank(ticket.w, now), ticket))

    def _pop_young(self) -> Ticket | None:
        while self._young:
            _, _, ticket = heapq.heappop(self._young)
            if ticket.live:
                return ticket
        return None

    def _pop_best(self, now: float) -> Ticket | None:
        if not self._dynamic:
            while self._heap:
                _, ticket = heapq.heappop(self._heap)
                if ticket.live:
                    return ticket
            return None
        self._list = [t for t in self._list if t.live]
        if not self._list:
            return None
        best = min(range(len(self._list)), key=lambda i: self.rank(self._list[i].w, now))
        ticket = self._list[best]
        self._list[best] = self._list[-1]
        self._list.pop()
        return ticket

    def _put_back(self, ticket: Ticket, now: float) -> None:
        if not ticket.ranked:
            heapq.heappush(self._young, (ticket.w.arrival - ticket.w.jump, ticket.w.seq, ticket))
        elif self._dynamic:
            self._list.append(ticket)
        else:
            heapq.heappush(self._heap, (self.rank(ticket.w, now), ticket))


class _Ranked:
    """One pump's order over a dynamic queue: ranked once, then re-ranked lazily. Admitting a request charges its
    session and key, which only raises the rank of their other waiters: a popped waiter of a charged session or
    key is ranked again and goes back if it fell behind. So a pump ranks each waiter about once, not once per
    admission. The queue's own list is emptied for the pump (waiters offered meanwhile land there)."""

    def __init__(self, queue: AdmissionQueue, now: float) -> None:
        self._queue, self._now = queue, now
        live = [t for t in queue._list if t.live]
        queue._list = []
        self._heap = [(queue.rank(t.w, now), t) for t in live]
        heapq.heapify(self._heap)
        self._sessions: set[str] = set()
        self._keys: set[str] = set()

    def pop(self) -> Ticket | None:
        while self._heap:
            rank, ticket = heapq.heappop(self._heap)
            if not ticket.live:
                continue
            req = ticket.w.req
            if req.session_key in self._sessions or req.tenant in self._keys:
                fresh = self._queue.rank(ticket.w, self._now)
                if self._heap and fresh > self._heap[0][0]:
                    heapq.heappush(self._heap, (fresh, ticket))
                    continue
            return ticket
        return None

    def charged(self, ticket: Ticket) -> None:
        self._sessions.add(ticket.w.req.session_key)
        self._keys.add(ticket.w.req.tenant)

    def rest(self) -> list[Ticket]:
        return [t for _, t in self._heap if t.live]
