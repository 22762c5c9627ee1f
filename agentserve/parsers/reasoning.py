"""Reasoning-block splitting: a table of (start, end, forced) markers and one incremental stage for all of them.

`forced` formats (deepseek_r1, nemotron3, …) are in reasoning from the first token, because their chat template
opens the block in the prompt; a leading start marker the model writes anyway is dropped. A reasoning block is only
opened by a start marker outside tool-call blocks (the tool stage says whether it is inside one), so a `<think>`
inside tool arguments stays argument text. Several reasoning blocks per output are allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .events import Event, ReasoningDelta
from .scanner import MarkerScanner, MarkerSet

__all__ = ["ReasoningFormat", "REASONING_FORMATS", "ReasoningStage"]


@dataclass(frozen=True)
class ReasoningFormat:
    start: str
    end: str
    forced: bool = False


_THINK = ("<think>", "</think>")
REASONING_FORMATS: dict[str, ReasoningFormat] = {
    "qwen3": ReasoningFormat(*_THINK),
    "glm45": ReasoningFormat(*_THINK),
    "nemotron_deci": ReasoningFormat(*_THINK),
    "deepseek_r1": ReasoningFormat(*_THINK, forced=True),
    "nemotron3": ReasoningFormat(*_THINK, forced=True),
    "nemotron_nano": ReasoningFormat(*_THINK, forced=True),
    "minimax_append_think": ReasoningFormat(*_THINK, forced=True),
    "kimi": ReasoningFormat("◁think▷", "◁/think▷"),
    "mistral": ReasoningFormat("[THINK]", "[/THINK]"),
}
# "gpt_oss" is handled by harmony.HarmonyStage (channels decide reasoning and tool calls together).


class ReasoningStage:
    """Splits text into reasoning (emitted here) and the rest (handed to `text_out`)."""

    def __init__(
        self,
        fmt: ReasoningFormat,
        started: bool,
        out: list[Event],
        text_out: Callable[[str], None],
        on_block_end: Callable[[], None],
        in_tool_block: Callable[[], bool],
    ) -> None:
        self.fmt = fmt
        self.out = out
        self.text_out = text_out
        self.on_block_end = on_block_end
        self.in_tool_block = in_tool_block
        self.sc = MarkerScanner()
        self.in_reasoning = fmt.forced or started
        self._in_set = MarkerSet((fmt.start, fmt.end))
        self._out_set = MarkerSet((fmt.start,))

    def feed(self, data: str, final: bool = False) -> None:
        sc = self.sc
        if data:
            sc.push(data)
        f = self.fmt
        while True:
            piece = sc.next(self._in_set if self.in_reasoning else self._out_set, final)
            if piece is None:
                break
            t, m = piece
            if self.in_reasoning:
                if t:
                    self.out.append(ReasoningDelta(t))
                if m == f.end:
                    self.in_reasoning = False
                    self.on_block_end()
                # a start marker inside reasoning is dropped (models repeat the prompt's opening tag)
            else:
                if t:
                    self.text_out(t)
                if m is not None:
                    if self.in_tool_block():
                        self.text_out(m)  # inside a tool call: argument text, not reasoning
                    else:
                        self.in_reasoning = True
