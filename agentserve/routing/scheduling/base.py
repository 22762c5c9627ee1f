"""The one interface behind which each part of the admission order sits.

When every replica is saturated, requests wait in the Router's admission queue (routing/admission.py). Their
order is a tuple: one value per enabled `RankTerm`, lowest first, then today's FCFS key (`arrival - priority
jump`, then arrival sequence), for those that have waited `rank_after_wait_s`; younger ones follow in FCFS order.
With no term enabled the order is exactly FCFS. Each term is one file:

- key_shares.py: per-key weighted shares (the key with the least decayed service per unit of weight first);
- interactive_first.py: a user's message ahead of background turns (tool results, compactions, other);
- session_las.py: least attained service per session (llm-d's program-aware fairness).

A term may rank by state that changes while a request waits (service granted to other requests of its session
or key: `dynamic`); the queue then re-ranks its waiters whenever it admits. The Router charges every routed
request's service (uncached prompt tokens plus expected output) to each term, queued or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from agentserve.protocol import RouteRequest


@dataclass(slots=True)
class Waiting:
    """One request waiting for a replica, as a term sees it."""

    req: RouteRequest
    arrival: float  # the queue's clock when it started waiting
    jump: float  # its priority / latency_sensitivity hint, in seconds (FCFS overtaking)
    seq: int


@runtime_checkable
class RankTerm(Protocol):
    name: ClassVar[str]  # as in RouterSpec.scheduling
    dynamic: ClassVar[bool]  # its value for a waiter can change while it waits

    def value(self, w: Waiting, now: float) -> float:
        """Lower is admitted first."""
        ...

    def charge(self, req: RouteRequest, tokens: float, now: float) -> None:
        """`req` was routed: it is served `tokens` (uncached prompt plus expected output)."""
        ...
