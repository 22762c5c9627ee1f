"""Least attained service per session: the waiting request whose session was served least recently goes first.

Why: at saturation a few long agent sessions (80-140K-token contexts, 30-40 turns) would otherwise hold the queue
against short ones; llm-d's program-aware fairness ranks by attained service per program (session) and cut TTFT
p99 2.8x with short sessions up to 6.7x faster, with no effect below saturation (the queue is then empty). A
session's subagents are sessions of their own; a request without a session key is its own one-request session.
"""

from __future__ import annotations

from typing import ClassVar

from agentserve.protocol import RouteRequest
from agentserve.routing.scheduling.base import Waiting
from agentserve.routing.scheduling.decay import DecayingCounters


class SessionLas:
    name: ClassVar[str] = "session_fairness"
    dynamic: ClassVar[bool] = True

    def __init__(self, *, half_life_s: float, max_sessions: int, aging_tokens_per_s: float = 0.0) -> None:
        self._served = DecayingCounters(half_life_s=half_life_s, max_keys=max_sessions)
        self._aging = aging_tokens_per_s

    def value(self, w: Waiting, now: float) -> float:
        served = self._served.get(w.req.session_key, now) if w.req.session_key else 0.0
        return served - self._aging * (now - w.arrival)

    def charge(self, req: RouteRequest, tokens: float, now: float) -> None:
        if req.session_key:
            self._served.add(req.session_key, tokens, now)
