"""Session-aware scheduling in the Router, each part a switch (RouterSpec.scheduling; all off: today's FCFS).

The admission order is built from rank terms, one per file behind `RankTerm` (base.py); KV-pressure awareness
is routing/kv_pressure.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from agentserve.routing.scheduling.base import RankTerm, Waiting
from agentserve.routing.scheduling.interactive_first import InteractiveFirst
from agentserve.routing.scheduling.key_shares import KeyShares
from agentserve.routing.scheduling.session_las import SessionLas


@dataclass(frozen=True, slots=True)
class SchedulingConfig:
    session_fairness: bool = False  # least attained service per session (session_las.py)
    interactive_first: bool = False  # user messages ahead of background turns (interactive_first.py)
    key_shares: bool = False  # per-key weighted shares (key_shares.py)
    key_weights: Mapping[str, float] = field(default_factory=dict)  # key digest -> weight
    default_key_weight: float = 1.0
    service_half_life_s: float = 60.0  # attained service decays with this half-life
    aging_tokens_per_s: float = 500.0  # session fairness: each second waited offsets this much attained service
    max_tracked: int = 100_000  # sessions (and keys) whose service is remembered
    kv_pressure: bool = False  # routing/kv_pressure.py
    # A request whose best replica by the cost (its cached prefix counted) is saturated waits for it rather than
    # taking a worse one that is free: late binding that keeps a session where its KV is (KvRouter).
    wait_for_cache: bool = False
    max_cache_wait_s: float = 30.0  # then it takes a free replica after all (shorter scatters sessions off their KV)
    kv_high_watermark: float = 0.9  # of a replica's KV blocks: above it, new work may not evict kept sessions
    kv_keep_gap_s: float = 30.0  # an idle session is expected back within this (its tool gap); later it may go
    kv_max_defer_s: float = 10.0  # a request held back for KV room this long is placed anyway (LRU evicts)
    shed_lowest: bool = True  # with an ordering term on, a full queue rejects its lowest-ranked waiter, not the newcomer
    # The ordering terms order a waiter only once it has waited this long (its priority jump counted); before, FCFS.
    # A lightly loaded queue's waits are short and reordering them only costs (docs/BENCHMARKS.md); 0: at once.
    rank_after_wait_s: float = 1.0

    @property
    def ordered(self) -> bool:
        return self.session_fairness or self.interactive_first or self.key_shares


def make_terms(cfg: SchedulingConfig) -> tuple[RankTerm, ...]:
    """The enabled terms, outermost first: key shares, then interactive first, then session fairness (a key's
    share holds whatever its sessions are; within a key a user's turn goes first; then the least served session)."""
    terms: list[RankTerm] = []
    if cfg.key_shares:
        terms.append(KeyShares(
            cfg.key_weights, default_weight=cfg.default_key_weight, half_life_s=cfg.service_half_life_s,
            max_keys=cfg.max_tracked,
        ))  # fmt: skip
    if cfg.interactive_first:
        terms.append(InteractiveFirst())
    if cfg.session_fairness:
        terms.append(SessionLas(
            half_life_s=cfg.service_half_life_s, max_sessions=cfg.max_tracked, aging_tokens_per_s=cfg.aging_tokens_per_s,
        ))  # fmt: skip
    return tuple(terms)


__all__ = ["InteractiveFirst", "KeyShares", "RankTerm", "SchedulingConfig", "SessionLas", "Waiting", "make_terms"]
