"""Per-session memory of what the engine saw, and the prefix report for the next turn."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

from agentserve.doctor.causes import Cause, Divergence, attribute


@dataclass(frozen=True)
class PrefixReport:
    expected_tokens: int  # previous turn's prompt + output
    reused_tokens: int  # leading tokens of this prompt equal to them
    cause: Cause | None  # None when the whole previous turn is a prefix of this prompt

    @property
    def reuse_ratio(self) -> float:
        return self.reused_tokens / self.expected_tokens if self.expected_tokens else 1.0

    def header(self) -> str:
        text = f"reuse={self.reuse_ratio:.4f}; reused={self.reused_tokens}; expected={self.expected_tokens}"
        return text + (f"; cause={self.cause}" if self.cause else "")


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    # Compare in slices first: sessions are long and mostly equal.
    step = 256
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


class SessionTracker:
    """Bounded LRU of sessions; each remembers its last turn's prompt and output token ids."""

    def __init__(
        self,
        decode: Callable[[Sequence[int]], str],
        special_ids: frozenset[int] = frozenset(),
        max_sessions: int = 4096,
    ) -> None:
        self._decode = decode
        self._special = special_ids
        self._max = max_sessions
        self._last: OrderedDict[str, tuple[list[int], int]] = OrderedDict()

    def check(self, session: str, prompt: Sequence[int]) -> PrefixReport | None:
        """None for a session's first turn (nothing to compare with)."""
        if not session or session not in self._last:
            return None
        expected, prompt_len = self._last[session]
        self._last.move_to_end(session)
        at = common_prefix(expected, prompt)
        if at == len(expected):
            return PrefixReport(len(expected), at, None)
        cause = attribute(Divergence(expected, prompt, at, prompt_len), self._decode, self._special)
        return PrefixReport(len(expected), at, cause)

    def record(self, session: str, prompt: Sequence[int], output: Sequence[int]) -> None:
        if not session:
            return
        self._last[session] = ([*prompt, *output], len(prompt))
        self._last.move_to_end(session)
        while len(self._last) > self._max:
            self._last.popitem(last=False)
