"""Deciding which engine replica serves a request: prefix index from KV events, cost vs load, admission."""

from agentserve.routing.kv_router import KvRouter, RouterConfig
from agentserve.routing.policies import POLICIES, RoutingPolicy, make_policy

__all__ = ["POLICIES", "KvRouter", "RouterConfig", "RoutingPolicy", "make_policy"]
