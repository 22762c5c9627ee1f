"""The routing cost: prefill work left after the cached prefix, plus the replica's active load.

    cost(r) = overlap_weight * (uncached prompt tokens + pending prefill tokens on r) / block_size
              + active KV blocks on r + this request's blocks

(Dynamo's `overlap_score_weight * prefill_blocks + decode_blocks`, with the expected output length
in the request's blocks.) The lowest cost wins; with temperature > 0 a softmax over range-normalised
costs samples instead. Near-ties (within `affinity_slack_blocks`) go to the replica that served the
session last, then to the replica with the smallest index, which spreads new content.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from agentserve.routing.load import ReplicaLoad

Reason = Literal["least_loaded", "prefix", "affinity", "only_replica"]


@dataclass(frozen=True, slots=True)
class CostConfig:
    block_size: int
    overlap_weight: float = 8.0  # Dynamo uses 1.0; see RouterSpec.overlap_weight
    temperature: float = 0.0
    default_osl: int = 256
    affinity_slack_blocks: float = 1.0
    max_in_flight: int | None = None  # per replica; over it a replica takes no new requests
    max_active_tokens: int | None = None  # pending prefill + active KV tokens per replica


@dataclass(frozen=True, slots=True)
class Candidate:
    replica: str
    overlap_blocks: int
    load: ReplicaLoad
    index_blocks: int = 0


@dataclass(frozen=True, slots=True)
class Choice:
    replica: str
    overlap_blocks: int
    cost: float
    reason: Reason


def request_blocks(prompt_tokens: int, osl: int | None, max_tokens: int, cfg: CostConfig) -> float:
    out = min(osl if osl is not None else cfg.default_osl, max_tokens)
    return (prompt_tokens + out) / cfg.block_size


def saturated(load: ReplicaLoad, cfg: CostConfig) -> bool:
    if cfg.max_in_flight is not None and load.in_flight >= cfg.max_in_flight:
        return True
    if cfg.max_active_tokens is not None:
        tokens = load.prefill_tokens + load.active_blocks * cfg.block_size
        return tokens >= cfg.max_active_tokens
    return False


def cost(c: Candidate, prompt_tokens: int, new_blocks: float, cfg: CostConfig) -> float:
    uncached = max(0, prompt_tokens - c.overlap_blocks * cfg.block_size)
    prefill_blocks = (uncached + c.load.prefill_tokens) / cfg.block_size
    return cfg.overlap_weight * prefill_blocks + c.load.active_blocks + new_blocks


def choose(
    candidates: list[Candidate],
    *,
    prompt_tokens: int,
    new_blocks: float,
    cfg: CostConfig,
    session_replica: str | None = None,
    rng: random.Random | None = None,
) -> Choice | None:
    """Pick a replica among the unsaturated candidates; None when all are saturated."""
    open_ = [c for c in candidates if not saturated(c.load, cfg)]
    if not open_:
        return None
    costs = {c.replica: cost(c, prompt_tokens, new_blocks, cfg) for c in open_}
    if len(open_) == 1:
        c = open_[0]
        return Choice(c.replica, c.overlap_blocks, costs[c.replica], "only_replica")
    if cfg.temperature > 0:
        pick = _sample(open_, costs, cfg.temperature, rng or random)
        return Choice(pick.replica, pick.overlap_blocks, costs[pick.replica], _reason(pick, False))
    best = min(costs.values())
    near = [c for c in open_ if costs[c.replica] <= best + cfg.affinity_slack_blocks]
    strict = min(near, key=lambda c: costs[c.replica])
    for c in near:
        if c.replica == session_replica:
            return Choice(c.replica, c.overlap_blocks, costs[c.replica], _reason(c, c is not strict))
    # Among exact ties, the replica caching least takes new content; rotation via the rng breaks the rest.
    ties = [c for c in near if costs[c.replica] == best]
    fewest = min(c.index_blocks for c in ties)
    ties = [c for c in ties if c.index_blocks == fewest]
    pick = ties[0] if len(ties) == 1 else (rng or random).choice(ties)
    return Choice(pick.replica, pick.overlap_blocks, costs[pick.replica], _reason(pick, False))


def _reason(c: Candidate, affinity: bool) -> Reason:
    if affinity:
        return "affinity"
    return "prefix" if c.overlap_blocks > 0 else "least_loaded"


def _sample(open_: list[Candidate], costs: dict[str, float], temperature: float, rng) -> Candidate:
    lo, hi = min(costs.values()), max(costs.values())
    span = hi - lo or 1.0
    weights = [math.exp(-((costs[c.replica] - lo) / span) / temperature) for c in open_]
    return rng.choices(open_, weights=weights, k=1)[0]
