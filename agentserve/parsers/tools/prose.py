"""Where a bare tool call (no marker: llama3_json's `{`, pythonic's `[`) may start in answer text: at the start of a
line, outside code fences. A `{` inside a sentence or a call shown in a fenced example is answer text.

The state is carried from one piece of text to the next, so the answer does not depend on how the stream was split.
"""

from __future__ import annotations

import re

__all__ = ["LineStarts"]

_INDENT = re.compile(r"[ \t]*")
_TICKS = re.compile(r"`+")
FENCE = "```"


class LineStarts:
    __slots__ = ("char", "at_start", "ticks", "fenced")

    def __init__(self, char: str) -> None:
        self.char = char  # the character that opens a bare call
        self.at_start = True  # only indentation (or a fence's first backticks) since the last newline
        self.ticks = 0  # backticks at the start of this line
        self.fenced = False

    def find(self, t: str) -> int:
        """Index of the first bare-call character in `t` at a line start outside a fence, or -1; the state is
        advanced up to it (or over all of `t`)."""
        i, n = 0, len(t)
        while i < n:
            if not self.at_start:
                j = t.find("\n", i)
                if j < 0:
                    return -1
                i, self.at_start, self.ticks = j + 1, True, 0
                continue
            if not self.ticks:
                i = _INDENT.match(t, i).end()  # type: ignore[union-attr]
                if i == n:
                    return -1
            c = t[i]
            if c == "`":
                k = _TICKS.match(t, i).end()  # type: ignore[union-attr]
                self.ticks += k - i
                i = k
                if self.ticks >= len(FENCE):
                    self.fenced = not self.fenced
                    self.at_start = False  # the rest of the line is the fence's info string
                continue
            if c == self.char and not self.ticks and not self.fenced:
                return i
            self.at_start = False
        return -1

    def resume(self, tail: str) -> None:
        """A call ended; `tail` is the text its block took after it (whitespace before the next answer text)."""
        j = tail.rfind("\n")
        self.at_start = j >= 0 and not tail[j + 1 :].strip(" \t")
        self.ticks = 0

    def skip(self, t: str) -> None:
        """`t` is answer text that opens with a bare-call character but was not a call: move past all of it."""
        while t:
            self.at_start = False  # past the bare-call character at t[0]
            k = self.find(t[1:])
            if k < 0:
                return
            t = t[1 + k :]
