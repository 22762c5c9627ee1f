"""`approx`: prefix overlap learned from the router's own decisions only (engines without KV events), against load.

A routed prompt counts as cached on its replica for `approx_ttl_s` (routing/approx.py); the cost is the same as
`kv`'s (routing/cost.py).
"""

from __future__ import annotations

import random
from typing import ClassVar

from agentserve.routing.cost import Choice, CostConfig
from agentserve.routing.policies.base import Placement, PrefixIndexes, by_cost


class ApproxPolicy:
    name: ClassVar[str] = "approx"
    uses_events: ClassVar[bool] = False
    learns: ClassVar[bool] = True
    uses_sessions: ClassVar[bool] = True

    def overlaps(self, indexes: PrefixIndexes, block_hashes: list[int]) -> dict[str, int]:
        return indexes.learned.overlaps(block_hashes)

    def pick(self, placement: Placement, cfg: CostConfig, rng: random.Random) -> Choice | None:
        return by_cost(placement, cfg, rng)
