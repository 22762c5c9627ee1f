"""Degenerate repetition: has the output become a loop? The last `min_tokens` tokens are periodic with some period
p <= `max_period` (a token run is p = 1, a sentence said again and again p = its length).

Incremental and constant per token: for every p, how many consecutive tokens so far equal the token p before them.
The last n tokens are p-periodic exactly when that run is at least n - p.
"""

from __future__ import annotations

from typing import Sequence

from agentserve.config import RepetitionSpec


class RepetitionDetector:
    def __init__(self, spec: RepetitionSpec) -> None:
        self._n = spec.min_tokens
        self._p = spec.max_period
        self._tail: list[int] = []  # the last max_period tokens
        self._runs = [0] * (spec.max_period + 1)  # index p: tokens in a row equal to the one p before
        self.period: int | None = None  # the loop's period once found

    def feed(self, token_ids: Sequence[int]) -> bool:
        """Take the next tokens; True once the output ends in a loop."""
        if self.period is not None:
            return True
        tail, runs, n, maxp = self._tail, self._runs, self._n, self._p
        for tok in token_ids:
            k = len(tail)
            for p in range(1, k + 1):
                if tail[k - p] == tok:
                    runs[p] += 1
                    if runs[p] >= n - p and self.period is None:
                        self.period = p
                else:
                    runs[p] = 0
            tail.append(tok)
            if k + 1 > maxp:
                del tail[0]
            if self.period is not None:
                return True
        return False
