"""Answer-text output with one policy: whitespace next to a structural block is text unless it frames the answer.

Between answer text, whitespace on both sides of a reasoning block or tool call is kept as written (`is <think>…
</think>42` reads `is 42`), as vLLM and Dynamo keep it. It only frames the answer at its two edges: before the first
answer text after a block (the template's `</think>\\n\\n`, which Qwen's template strips again on replay) and after the
last (`text\\n\\n<tool_call>…</tool_call>\\n` at the end of the output). So trailing whitespace is held until
non-whitespace follows; at end of stream it is kept unless a block came after it.
"""

from __future__ import annotations

from .events import Event, TextDelta
from .jsonscan import WS

__all__ = ["TextOut"]


class TextOut:
    __slots__ = ("out", "_held", "_edge", "emitted")

    def __init__(self, out: list[Event]) -> None:
        self.out = out
        self._held = ""
        self._edge = False  # a block opened or closed since the last answer text
        self.emitted = False  # any non-whitespace text emitted

    def emit(self, text: str) -> None:
        if self._edge and not self.emitted:
            text = text.lstrip(WS)
            if not text:
                return
        body = text.rstrip(WS)
        if not body:
            self._held += text
            return
        held, self._held = self._held, text[len(body) :]
        self._edge = False
        self.emitted = True
        self.out.append(TextDelta(held + body if held else body))

    def boundary(self) -> None:
        """A structural block (reasoning, tool call) starts or ends here."""
        self._edge = True

    def finish(self) -> None:
        if self._held and not self._edge:
            self.out.append(TextDelta(self._held))
        self._held = ""
