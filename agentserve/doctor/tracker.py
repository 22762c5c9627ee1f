"""The doctor in one synchronous object, for offline use (`agentserve doctor TRACE`, benchmarks).

The serving path uses PrefixDoctor (prefix_doctor.py), which runs the same `diagnose` off the event loop.
"""

from __future__ import annotations

from typing import Sequence

from agentserve.doctor.report import Decode, PrefixReport, common_prefix, diagnose
from agentserve.doctor.sessions import SessionMemory

DEFAULT_MAX_BYTES = 256 * 1024 * 1024

__all__ = ["DEFAULT_MAX_BYTES", "PrefixReport", "SessionTracker", "common_prefix"]


class SessionTracker:
    """Each session's last turn (bounded in bytes), and the prefix report for its next prompt.

    Every call runs on the caller's thread, decoding included: not for an event loop.
    """

    def __init__(
        self, decode: Decode, special_ids: frozenset[int] = frozenset(), max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self._decode = decode
        self._special = special_ids
        self._memory = SessionMemory(max_bytes)

    def check(self, session: str, prompt: Sequence[int]) -> PrefixReport | None:
        """None for a session's first turn (nothing to compare with)."""
        last = self._memory.get(session) if session else None
        if last is None:
            return None
        return diagnose(last.tokens.tolist(), last.prompt_len, prompt, self._decode, self._special)

    def record(self, session: str, prompt: Sequence[int], output: Sequence[int]) -> None:
        if session:
            self._memory.put(session, prompt, output)
