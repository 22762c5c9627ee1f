"""Deciding which engine replica serves a request."""

from agentserve.routing.least_loaded import LeastLoadedPolicy

__all__ = ["LeastLoadedPolicy"]
