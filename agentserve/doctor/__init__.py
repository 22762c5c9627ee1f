"""Prefix-stability doctor: where a turn's prompt stopped extending what the engine already had, and why."""

from agentserve.doctor.causes import Cause, attribute
from agentserve.doctor.tracker import PrefixReport, SessionTracker

__all__ = ["Cause", "PrefixReport", "SessionTracker", "attribute"]
