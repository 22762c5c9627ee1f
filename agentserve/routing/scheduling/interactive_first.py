"""A user's message ahead of background work: the turn a person waits on (`user_message`) is admitted before
tool results, subagent spawns, compactions and other requests (ingress/lineage.py classifies them).

Strict between the two classes; a background request is never held past `max_wait_s` (it is then answered
overloaded with retry-after, as any waiter).
"""

from __future__ import annotations

from typing import ClassVar

from agentserve.protocol import RouteRequest
from agentserve.routing.scheduling.base import Waiting

INTERACTIVE = frozenset({"user_message"})


class InteractiveFirst:
    name: ClassVar[str] = "interactive_first"
    dynamic: ClassVar[bool] = False

    def value(self, w: Waiting, now: float) -> float:
        return 0.0 if w.req.hints.kind in INTERACTIVE else 1.0

    def charge(self, req: RouteRequest, tokens: float, now: float) -> None:
        pass
