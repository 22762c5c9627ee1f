"""Reasoning-block splitting: a table of (start, end, forced) markers and one incremental stage for all of them.

`forced` formats (deepseek_r1, nemotron3, …) are in reasoning from the first token, because their chat template
opens the block in the prompt; a leading start marker the model writes anyway is dropped. A reasoning block is only
opened by a start marker outside tool-call blocks (the tool stage says whether it is inside one), so a `<think>`
inside tool arguments stays argument text. Several reasoning blocks per output are allowed.

`implicit_end` markers end an unclosed block and stay in the output for the tool parser: Qwen3.5 opens a tool call
inside its thinking without `</think>` (as vLLM notes), Kimi its tool-call section. A marker with a confirmation only
ends the block when that follows it (after whitespace, within `LOOKAHEAD` characters): `<tool_call>` is a call only
as `<tool_call>\n<function=`, and a thought that merely mentions `<tool_call>` stays reasoning.

`also_start` are shorter spellings of the start marker that open the block too: Gemma 4 opens it with the special
token `<|channel>` and a `thought` label (`start`, label dropped); the bare token alone must still open it, and the
decode path must keep that token for the parser.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .events import Event, ReasoningDelta
from .jsonscan import WS
from .scanner import MarkerScanner, MarkerSet

__all__ = ["ReasoningFormat", "REASONING_FORMATS", "ReasoningStage"]

LOOKAHEAD = 32  # characters after an implicit-end marker within which its confirmation must start


@dataclass(frozen=True)
class ReasoningFormat:
    start: str
    end: str
    forced: bool = False
    implicit_end: tuple[tuple[str, str], ...] = ()  # (marker, confirmation or "") pairs
    also_start: tuple[str, ...] = ()  # shorter spellings of `start` (the longest one written wins)

    @property
    def starts(self) -> tuple[str, ...]:
        return (self.start, *self.also_start)


_THINK = ("<think>", "</think>")
REASONING_FORMATS: dict[str, ReasoningFormat] = {
    "qwen3": ReasoningFormat(*_THINK, implicit_end=(("<tool_call>", "<function"),)),
    "glm45": ReasoningFormat(*_THINK),
    "glm47": ReasoningFormat(*_THINK),  # GLM-4.7's prompt opens <think> itself: reasoning_started says so
    "nemotron_deci": ReasoningFormat(*_THINK),
    "deepseek_r1": ReasoningFormat(*_THINK, forced=True),
    "nemotron3": ReasoningFormat(*_THINK, forced=True),
    "nemotron_nano": ReasoningFormat(*_THINK, forced=True),
    "minimax_append_think": ReasoningFormat(*_THINK, forced=True),
    # Kimi-K2-Thinking / K2.5 write <think> (tokens of their tokenizer). ◁think▷ is Kimi-VL-Thinking's: a vision
    # model without tool calls, not served here.
    "kimi": ReasoningFormat(*_THINK, implicit_end=(("<|tool_calls_section_begin|>", ""),)),
    "mistral": ReasoningFormat("[THINK]", "[/THINK]"),
    # Gemma 4: `<|channel>thought\n…<channel|>`; a call may open straight from the thought (as vLLM notes).
    "gemma4": ReasoningFormat("<|channel>thought\n", "<channel|>", implicit_end=(("<|tool_call>", ""),),
                              also_start=("<|channel>thought", "<|channel>")),
    "seed_oss": ReasoningFormat("<seed:think>", "</seed:think>"),
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
        self._implicit = dict(fmt.implicit_end)
        self._in_set = MarkerSet((*fmt.starts, fmt.end, *self._implicit))
        self._out_set = MarkerSet(fmt.starts)

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
                elif m in self._implicit:
                    ends = self._confirmed(self._implicit[m], final)
                    if ends is None:  # undecided until more text arrives
                        sc.unread(m)
                        break
                    if ends:
                        self.in_reasoning = False
                        self.on_block_end()
                        sc.unread(m)
                    else:
                        self.out.append(ReasoningDelta(m))
                # a start marker inside reasoning is dropped (models repeat the prompt's opening tag)
            else:
                if t:
                    self.text_out(t)
                if m is not None:
                    if self.in_tool_block():
                        self.text_out(m)  # inside a tool call: argument text, not reasoning
                    else:
                        self.in_reasoning = True

    def _confirmed(self, confirm: str, final: bool) -> bool | None:
        """Whether the text after an implicit-end marker confirms it (None: not known yet)."""
        if not confirm:
            return True
        after = self.sc.peek(LOOKAHEAD + len(confirm))
        rest = after.lstrip(WS)
        if rest.startswith(confirm):
            return len(after) - len(rest) <= LOOKAHEAD
        if final or len(after) - len(rest) > LOOKAHEAD or not confirm.startswith(rest):
            return False
        return None
