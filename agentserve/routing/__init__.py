"""Deciding which engine replica serves a request: prefix index from KV events, cost vs load, admission."""

from agentserve.routing.kv_router import KvRouter, RouterConfig
from agentserve.routing.least_loaded import LeastLoadedPolicy

__all__ = ["KvRouter", "LeastLoadedPolicy", "RouterConfig"]
