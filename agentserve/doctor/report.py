"""The prefix report: how much of a session's previous turn the next prompt reuses, and why not all.

`diagnose` is the one implementation both faces of the doctor run (the serving path's PrefixDoctor
and the offline SessionTracker), so their reports are the same by construction.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Callable, Sequence

from agentserve.doctor.causes import Cause, Divergence, attribute

Decode = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class PrefixReport:
    expected_tokens: int  # previous turn's prompt + output
    reused_tokens: int  # leading tokens of this prompt equal to them
    cause: Cause | None  # None when the whole previous turn is a prefix of this prompt

    @property
    def reuse_ratio(self) -> float:
        return self.reused_tokens / self.expected_tokens if self.expected_tokens else 1.0

    def header(self) -> str:
        """The `x-agentserve-prefix` response header."""
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


def common_prefix_ids(a: array, b: array) -> int:
    """`common_prefix` for two arrays, compared a chunk at a time in C: ~0.3 ms at 100K tokens, fit for a loop."""
    n = min(len(a), len(b))
    i = 0
    for step in (4096, 256):
        while i + step <= n and a[i : i + step] == b[i : i + step]:
            i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def diagnose(
    expected: Sequence[int],
    prompt_len: int,
    prompt: Sequence[int],
    decode: Decode,
    special_ids: frozenset[int] = frozenset(),
    output_rerendered: bool = False,
    *,
    at: int | None = None,
    deadline: float | None = None,
) -> PrefixReport:
    """Compare turn N's prompt + output (`expected`, whose first `prompt_len` tokens were the prompt) with
    turn N+1's prompt. Decodes windows around a divergence (causes.WINDOW_TOKENS), whatever the history's length;
    still milliseconds of decoding: keep it off an event loop.
    `at`: the common prefix when the caller has it; `deadline`: see causes.attribute."""
    at = common_prefix(expected, prompt) if at is None else at
    if at == len(expected):
        return PrefixReport(len(expected), at, None)
    cause = attribute(Divergence(expected, prompt, at, prompt_len, output_rerendered), decode, special_ids, deadline)
    return PrefixReport(len(expected), at, cause)
