"""Prefix-stability doctor: where a turn's prompt stopped extending what the engine already had, and why.

`PrefixDoctor` is the serving path's (async, bounded in bytes, off the event loop); `SessionTracker`
is the same diagnosis on the caller's thread, for offline tools (agentserve/offline/doctor_replay.py).
"""

from agentserve.doctor.causes import Cause, attribute
from agentserve.doctor.prefix_doctor import DoctorStats, PrefixDoctor
from agentserve.doctor.report import PrefixReport
from agentserve.doctor.tracker import SessionTracker

__all__ = ["Cause", "DoctorStats", "PrefixDoctor", "PrefixReport", "SessionTracker", "attribute"]
