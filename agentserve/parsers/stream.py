"""`StreamParser`: reasoning first, then tool calls on the remaining text, fed one text delta at a time.

    p = StreamParser(reasoning="qwen3", tool_calls="hermes", tools=[...], reasoning_started=False,
                     special_markers=("<tool_call>", "</tool_call>"))  # markers that are special tokens, if any
    events = p.feed(delta)      # any number of times
    events += p.finish()        # once, at end of stream

`feed` never raises on model text; configuration errors (unknown names) raise `ValueError` in the constructor.
`special_markers` are markers the tokenizer has as special tokens: the parsers consume them, and they never appear in
the text of any event (see special.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .events import Event, TextDelta
from .formats import GPT_OSS, HARMONY, TOOL_FORMATS
from .harmony import HarmonyStage
from .reasoning import REASONING_FORMATS, ReasoningStage
from .scanner import MarkerScanner
from .schema import ToolIndex
from .sink import CallSink, default_id
from .special import SpecialScrub
from .text import TextOut
from .tools.base import BlockStage

__all__ = ["StreamParser"]


class StreamParser:
    """Incremental parser for one model output (one choice of one request)."""

    def __init__(
        self,
        reasoning: str | None = None,
        tool_calls: str | None = None,
        tools: Iterable[Mapping[str, Any]] | None = None,
        reasoning_started: bool = False,
        id_factory: Callable[[], str] | None = None,
        special_markers: Iterable[str] = (),
    ) -> None:
        if reasoning is not None and reasoning != GPT_OSS and reasoning not in REASONING_FORMATS:
            raise ValueError(f"unknown reasoning parser {reasoning!r}")
        if tool_calls is not None and tool_calls != HARMONY and tool_calls not in TOOL_FORMATS:
            raise ValueError(f"unknown tool-call parser {tool_calls!r}")
        harmony = reasoning == GPT_OSS or tool_calls == HARMONY
        if harmony and (reasoning not in (None, GPT_OSS) or tool_calls not in (None, HARMONY)):
            raise ValueError("gpt_oss reasoning and harmony tool calls only combine with each other (or None)")
        self.reasoning = reasoning
        self.tool_calls = tool_calls
        self._events: list[Event] = []
        self._finished = False
        self._scrub = SpecialScrub(special_markers)
        self.internal_errors: list[Exception] = []  # parser bugs caught by feed()/finish() (see _degrade)
        out = self._events
        self._text = TextOut(out)
        self._sink = CallSink(out, id_factory or default_id)
        tool_index = ToolIndex(tools)
        self._harmony: HarmonyStage | None = None
        self._tools: BlockStage | None = None
        self._reasoning: ReasoningStage | None = None
        if harmony:
            self._harmony = HarmonyStage(out, self._sink, self._text, reasoning is not None, tool_calls is not None)
            return
        if tool_calls is not None:
            self._tools = BlockStage(TOOL_FORMATS[tool_calls], self._sink, self._text, tool_index)
        if reasoning is not None:
            self._reasoning = ReasoningStage(
                REASONING_FORMATS[reasoning],
                reasoning_started,
                out,
                self._after_reasoning,
                self._text.boundary,
                self._in_tool_block,
            )

    # -- plumbing between stages -----------------------------------------------------------------------------
    def _after_reasoning(self, text: str) -> None:
        if self._tools is not None:
            self._tools.feed(text)
        else:
            self._text.emit(text)

    def _in_tool_block(self) -> bool:
        return self._tools is not None and self._tools.in_block

    def _take(self) -> list[Event]:
        events = _merge(self._events)
        self._events.clear()
        return self._scrub.events(events) if self._scrub else events

    # -- public API -----------------------------------------------------------------------------------------
    def feed(self, delta: str) -> list[Event]:
        """Parse the next text delta; returns the events it completes (possibly none)."""
        if not delta or self._finished:
            return []
        try:
            if self._harmony is not None:
                self._harmony.feed(delta)
            elif self._reasoning is not None:
                self._reasoning.feed(delta)
            else:
                self._after_reasoning(delta)
        except Exception as exc:  # noqa: BLE001 - a parser bug must not kill the stream; surface the text
            return self._degrade(delta, exc)
        return self._take()

    def finish(self) -> list[Event]:
        """End of stream: flush held text, report an unfinished tool call as `ToolCallTruncated`."""
        if self._finished:
            return []
        self._finished = True
        try:
            if self._harmony is not None:
                self._harmony.feed("", final=True)
                return self._take()
            if self._reasoning is not None:
                self._reasoning.feed("", final=True)
            if self._tools is not None:
                self._tools.feed("", final=True)
            self._text.finish()
        except Exception as exc:  # noqa: BLE001
            return self._degrade("", exc)
        return self._take()

    def _degrade(self, delta: str, exc: Exception) -> list[Event]:
        """Internal error: stop parsing and pass everything from here on as text (never raise, never drop)."""
        self.internal_errors.append(exc)
        self._harmony = self._reasoning = self._tools = None
        if delta:
            self._events.append(TextDelta(delta))
        return self._take()

    @property
    def scanners(self) -> list[MarkerScanner]:
        """The marker scanners in use (their `work` counters let tests check per-delta cost)."""
        out = []
        for stage in (self._harmony, self._reasoning, self._tools):
            sc = getattr(stage, "sc", None) or getattr(stage, "scanner", None)
            if sc is not None:
                out.append(sc)
        return out


def _merge(events: list[Event]) -> list[Event]:
    """Join adjacent text/reasoning/argument deltas produced within one feed (fewer, larger events)."""
    if len(events) < 2:
        return list(events)
    out: list[Event] = []
    for ev in events:
        if out:
            last = out[-1]
            if type(ev) is type(last):
                if isinstance(ev, TextDelta):
                    out[-1] = TextDelta(last.text + ev.text)  # type: ignore[union-attr]
                    continue
                from .events import ReasoningDelta, ToolCallArgsDelta

                if isinstance(ev, ReasoningDelta):
                    out[-1] = ReasoningDelta(last.text + ev.text)  # type: ignore[union-attr]
                    continue
                if isinstance(ev, ToolCallArgsDelta) and ev.index == last.index:  # type: ignore[union-attr]
                    out[-1] = ToolCallArgsDelta(ev.index, last.fragment + ev.fragment)  # type: ignore[union-attr]
                    continue
        out.append(ev)
    return out
