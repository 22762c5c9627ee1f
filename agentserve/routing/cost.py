"""The routing cost: prefill work left after the cached prefix, plus the replica's active load.

    cost(r) = overlap_weight * (uncached prompt tokens + pending prefill tokens on r) / block_size
              + active KV blocks on r + this request's blocks

(Dynamo's `overlap_score_weight * prefill_blocks + decode_blocks`, with the expected output length
in the request's blocks.) The lowest cost wins; with temperature > 0 a softmax over range-normalised
costs samples instead.

Two rules for agent sessions, whose turns arrive seconds apart and each extend the last one's prompt:
- A session stays on the replica of its last turn unless another would save it more than `session_stay_tokens`
  of prefill: moving re-prefills the whole conversation there, work the cost of one request does not see.
- A new session goes only to a replica carrying at most `session_spread` times the mean number of sessions
  (bounded loads, as in consistent hashing with bounded loads): a replica's in-flight load misses the sessions
  between turns, and without the bound new sessions pile onto the few replicas caching a popular system prompt.
Among exact ties the replica caching least takes new content.
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
    overlap_weight: float = 16.0  # Dynamo uses 1.0; see RouterSpec.overlap_weight
    temperature: float = 0.0
    default_osl: int = 256
    session_stay_tokens: int = 1024
    session_spread: float | None = 1.1  # None: new sessions placed by cost alone
    max_in_flight: int | None = None  # per replica; over it a replica takes no new requests
    max_active_tokens: int | None = None  # pending prefill + active KV tokens per replica
    max_prefill_tokens: int | None = None  # pending (uncached, not yet prefilled) prompt tokens per replica


@dataclass(frozen=True, slots=True)
class Candidate:
    replica: str
    overlap_blocks: int
    load: ReplicaLoad
    index_blocks: int = 0
    resident_sessions: int = 0


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
    if cfg.max_prefill_tokens is not None and load.prefill_tokens >= cfg.max_prefill_tokens:
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
    new_session: bool = False,
    rng: random.Random | None = None,
) -> Choice | None:
    """Pick a replica among the unsaturated candidates; None when all are saturated."""
    open_ = [c for c in candidates if not saturated(c.load, cfg)]
    if not open_:
        return None
    if new_session and cfg.session_spread is not None:
        open_ = _within_spread(open_, candidates, cfg.session_spread)
    costs = {c.replica: cost(c, prompt_tokens, new_blocks, cfg) for c in open_}
    if len(open_) == 1:
        c = open_[0]
        return Choice(c.replica, c.overlap_blocks, costs[c.replica], "only_replica")
    if cfg.temperature > 0:
        pick = _sample(open_, costs, cfg.temperature, rng or random)
        return Choice(pick.replica, pick.overlap_blocks, costs[pick.replica], _reason(pick, False))
    best = min(costs.values())
    stay = cfg.overlap_weight * cfg.session_stay_tokens / cfg.block_size
    near = [c for c in open_ if costs[c.replica] <= best + stay]
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


def _within_spread(open_: list[Candidate], every: list[Candidate], spread: float) -> list[Candidate]:
    """The open replicas carrying at most `spread` x the mean sessions (never empty: the least-carrying one
    is at or under the mean, unless it is saturated, and then the bound yields to the open ones)."""
    cap = spread * sum(c.resident_sessions for c in every) / len(every)
    return [c for c in open_ if c.resident_sessions <= cap] or open_


def _reason(c: Candidate, affinity: bool) -> Reason:
    if affinity:
        return "affinity"
    return "prefix" if c.overlap_blocks > 0 else "least_loaded"


def _sample(open_: list[Candidate], costs: dict[str, float], temperature: float, rng) -> Candidate:
    lo, hi = min(costs.values()), max(costs.values())
    span = hi - lo or 1.0
    weights = [math.exp(-((costs[c.replica] - lo) / span) / temperature) for c in open_]
    return rng.choices(open_, weights=weights, k=1)[0]
