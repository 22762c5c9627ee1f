"""Markers that are special tokens of the model's tokenizer: structure for the parsers, never text for the client.

The decode path hands a special token's text to the parsers only when their format consumes it. Where a parser state
does not expect it (a harmony `<|constrain|>` outside a header, a marker inside a broken call's raw text) it would
reach the client as text; this removes it there, as a detokenizer that skips special tokens would have.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .events import (
    Event,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    ToolCallTruncated,
)

__all__ = ["SpecialScrub"]


class SpecialScrub:
    """Removes the given special-token texts from every client-visible string of parser events."""

    __slots__ = ("_re",)

    def __init__(self, markers: Iterable[str]) -> None:
        ms = sorted({m for m in markers if m}, key=len, reverse=True)
        self._re = re.compile("|".join(map(re.escape, ms))) if ms else None

    def __bool__(self) -> bool:
        return self._re is not None

    def text(self, s: str) -> str:
        return self._re.sub("", s) if self._re is not None and s else s

    def events(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        t = self.text
        for ev in events:
            # The per-token events are rebuilt only when a marker was removed (re.sub returns its input
            # unchanged when nothing matched), so the common case allocates nothing.
            if isinstance(ev, (TextDelta, ReasoningDelta)):
                text = t(ev.text)
                if not text:
                    continue
                if text is not ev.text:
                    ev = type(ev)(text)
            elif isinstance(ev, ToolCallArgsDelta):
                fragment = t(ev.fragment)
                if not fragment:
                    continue
                if fragment is not ev.fragment:
                    ev = ToolCallArgsDelta(ev.index, fragment)
            elif isinstance(ev, ToolCallEnd):
                ev = ToolCallEnd(ev.index, t(ev.arguments))
            elif isinstance(ev, ToolCallStart):
                ev = ToolCallStart(ev.index, ev.id, t(ev.name))
            elif isinstance(ev, ToolCallError):
                ev = ToolCallError(ev.index, ev.message, t(ev.raw))
            elif isinstance(ev, ToolCallTruncated):
                ev = ToolCallTruncated(ev.index, t(ev.raw))
            out.append(ev)
        return out
