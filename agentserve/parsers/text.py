"""Answer-text output with one policy: whitespace that only frames a structural block is not text.

Trailing whitespace is held until non-whitespace follows; it is dropped when a tool call follows and kept at end of
stream. Leading whitespace right after a reasoning block or a tool call is dropped. Everything else passes as is.
"""

from __future__ import annotations

from .events import Event, TextDelta
from .jsonscan import WS

__all__ = ["TextOut"]


class TextOut:
    __slots__ = ("out", "_held", "_after_block", "emitted")

    def __init__(self, out: list[Event]) -> None:
        self.out = out
        self._held = ""
        self._after_block = False
        self.emitted = False  # any non-whitespace text emitted

    def emit(self, text: str) -> None:
        if self._after_block:
            text = text.lstrip(WS)
            if not text:
                return
            self._after_block = False
        body = text.rstrip(WS)
        if not body:
            self._held += text
            return
        if self._held:
            body = self._held + body
        self._held = text[len(text.rstrip(WS)) :]
        self.emitted = True
        self.out.append(TextDelta(body))

    def boundary(self) -> None:
        """A structural block (reasoning, tool call) ends here: drop framing whitespace around it."""
        self._held = ""
        self._after_block = True

    def before_block(self) -> None:
        self._held = ""

    def finish(self) -> None:
        if self._held:
            self.out.append(TextDelta(self._held))
            self._held = ""
