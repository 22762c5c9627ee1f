"""Per-key weighted shares: at saturation each API key gets service in proportion to its weight.

The waiter whose key has the least decayed service per unit of weight goes first (weighted fair queueing on
virtual time, as Dynamo's policy-class DRR and llm-d's flow fairness do across tenants). Keys are the caller's
key digest (RouteRequest.tenant); a key not listed has `default_weight`.
"""

from __future__ import annotations

from typing import ClassVar, Mapping

from agentserve.protocol import RouteRequest
from agentserve.routing.scheduling.base import Waiting
from agentserve.routing.scheduling.decay import DecayingCounters


class KeyShares:
    name: ClassVar[str] = "key_shares"
    dynamic: ClassVar[bool] = True

    def __init__(self, weights: Mapping[str, float], *, default_weight: float, half_life_s: float, max_keys: int) -> None:
        self._weights = dict(weights)
        self._default = default_weight
        self._served = DecayingCounters(half_life_s=half_life_s, max_keys=max_keys)

    def weight(self, key: str) -> float:
        return self._weights.get(key, self._default)

    def value(self, w: Waiting, now: float) -> float:
        return self._served.get(w.req.tenant, now) / self.weight(w.req.tenant)

    def charge(self, req: RouteRequest, tokens: float, now: float) -> None:
        self._served.add(req.tenant, tokens, now)
