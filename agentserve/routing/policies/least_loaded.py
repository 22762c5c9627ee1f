"""`least_loaded`: the cost of routing/cost.py with no prefix term (every overlap is 0), so the replica with the
least pending prefill and active KV blocks wins; sessions still stay on their replica and new ones spread, and
saturated replicas take nothing (the request waits in admission)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import ClassVar

from agentserve.routing.cost import Choice, CostConfig
from agentserve.routing.policies.base import Placement, PrefixIndexes, by_cost


class LeastLoadedPolicy:
    name: ClassVar[str] = "least_loaded"
    uses_events: ClassVar[bool] = False
    learns: ClassVar[bool] = False
    uses_sessions: ClassVar[bool] = True

    def overlaps(self, indexes: PrefixIndexes, block_hashes: list[int]) -> dict[str, int]:
        return {}

    def pick(self, placement: Placement, cfg: CostConfig, rng: random.Random) -> Choice | None:
        # KvRouter builds the placement from `overlaps` (none); any overlap is zeroed here too, so the policy is
        # prefix-blind whoever builds it.
        if any(c.overlap_blocks for c in placement.candidates):
            blind = tuple(replace(c, overlap_blocks=0) for c in placement.candidates)
            placement = replace(placement, candidates=blind)
        return by_cost(placement, cfg, rng)
