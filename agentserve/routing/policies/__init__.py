"""Routing policies, one per file behind `RoutingPolicy` (base.py), chosen by name (RouterSpec.policy)."""

from __future__ import annotations

from typing import Literal

from agentserve.routing.policies.approx import ApproxPolicy
from agentserve.routing.policies.base import Placement, PrefixIndexes, RoutingPolicy, by_cost
from agentserve.routing.policies.kv import KvPolicy
from agentserve.routing.policies.least_loaded import LeastLoadedPolicy
from agentserve.routing.policies.round_robin import RoundRobinPolicy

PolicyName = Literal["kv", "approx", "least_loaded", "round_robin"]

POLICIES: dict[str, type[RoutingPolicy]] = {
    p.name: p for p in (KvPolicy, ApproxPolicy, LeastLoadedPolicy, RoundRobinPolicy)
}


def make_policy(name: str) -> RoutingPolicy:
    """A new instance of the policy registered under `name`; ValueError naming the known ones otherwise."""
    cls = POLICIES.get(name)
    if cls is None:
        raise ValueError(f"unknown routing policy {name!r}: one of {', '.join(POLICIES)}")
    return cls()


__all__ = [
    "POLICIES",
    "ApproxPolicy",
    "KvPolicy",
    "LeastLoadedPolicy",
    "Placement",
    "PolicyName",
    "PrefixIndexes",
    "RoundRobinPolicy",
    "RoutingPolicy",
    "by_cost",
    "make_policy",
]
