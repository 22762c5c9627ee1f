"""`kv`: prefix overlap from the engines' KV events, against load (routing/cost.py).

A prompt just routed counts as cached on its replica until the engine's events confirm it (the learned index,
for `provisional_ttl_s`), so a burst of requests sharing a prefix follows the first one before any event arrives;
a replica that publishes no events is served by the learned index alone.
"""

from __future__ import annotations

import random
from typing import ClassVar

from agentserve.routing.cost import Choice, CostConfig
from agentserve.routing.policies.base import Placement, PrefixIndexes, by_cost


class KvPolicy:
    name: ClassVar[str] = "kv"
    uses_events: ClassVar[bool] = True
    learns: ClassVar[bool] = True
    uses_sessions: ClassVar[bool] = True

    def overlaps(self, indexes: PrefixIndexes, block_hashes: list[int]) -> dict[str, int]:
        found = indexes.reported.overlaps(block_hashes)
        for replica, n in indexes.learned.overlaps(block_hashes).items():
            if n > found.get(replica, 0):
                found[replica] = n
        return found

    def pick(self, placement: Placement, cfg: CostConfig, rng: random.Random) -> Choice | None:
        return by_cost(placement, cfg, rng)
