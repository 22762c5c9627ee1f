"""Engines: token ids in, token deltas out."""

from agentserve.engines.base import Engine, EngineStats
from agentserve.engines.factory import make_engine

__all__ = ["Engine", "EngineStats", "make_engine"]
