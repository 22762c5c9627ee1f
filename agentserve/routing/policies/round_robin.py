"""`round_robin`: every replica in turn, in replica-id order, whatever its load or cache (a baseline for
benchmarks: it never queues a request and ignores sessions)."""

from __future__ import annotations

import random
from typing import ClassVar

from agentserve.routing.cost import Choice, CostConfig
from agentserve.routing.policies.base import Placement, PrefixIndexes


class RoundRobinPolicy:
    name: ClassVar[str] = "round_robin"
    uses_events: ClassVar[bool] = False
    learns: ClassVar[bool] = False
    uses_sessions: ClassVar[bool] = False

    def __init__(self) -> None:
        self._turn = 0

    def overlaps(self, indexes: PrefixIndexes, block_hashes: list[int]) -> dict[str, int]:
        return {}

    def pick(self, placement: Placement, cfg: CostConfig, rng: random.Random) -> Choice | None:
        self._turn += 1
        names = sorted(c.replica for c in placement.candidates)
        return Choice(names[self._turn % len(names)], 0, 0.0, "least_loaded")
