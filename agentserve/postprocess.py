"""Ingress postprocessor: engine token deltas -> incremental detokenizer -> parsers -> StreamEvents.

One instance per request. Stop strings are applied here, on decoded text, so every engine
behaves the same; the caller stops consuming (and so aborts the engine request) once `stopped`.
Special tokens that are markers of the active parsers reach them (detokenize.py); no other special token does.
"""

from __future__ import annotations

from typing import Any, Sequence

from agentserve.detokenize import Detokenizer, special_tokens
from agentserve.parsers import StreamParser
from agentserve.protocol import EngineDelta
from agentserve.protocol.events import Finish, Usage


class StopStrings:
    """Cuts text at the first stop string, holding back only a possible partial match."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._buf = ""
        self.hit = False
        self.matched: str | None = None  # the stop string that ended the text (Anthropic reports it)

    def feed(self, text: str) -> str:
        if not self._stops:
            return text
        if self.hit:
            return ""
        self._buf += text
        found = [(i, s) for s in self._stops if (i := self._buf.find(s)) >= 0]
        if found:
            cut, self.matched = min(found, key=lambda f: f[0])
            out, self._buf, self.hit = self._buf[:cut], "", True
            return out
        keep = min(self._hold, len(self._buf))
        out, self._buf = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
        return out

    def flush(self) -> str:
        out, self._buf = ("" if self.hit else self._buf), ""
        return out


class Postprocessor:
    def __init__(
        self,
        tokenizer: Any,  # a transformers fast tokenizer
        *,
        reasoning_parser: str | None,
        tool_call_parser: str | None,
        tools: list[dict[str, Any]],
        stop: Sequence[str] = (),
        reasoning_started: bool = False,
        skip_special_tokens: bool = True,
        id_factory=None,
    ) -> None:
        tool_call_parser = tool_call_parser if tools else None
        keep = special_tokens(tokenizer).kept(reasoning_parser, tool_call_parser) if skip_special_tokens else {}
        self._decode = Detokenizer(tokenizer, keep, skip_special_tokens)
        kwargs = {"id_factory": id_factory} if id_factory is not None else {}
        self._parser = StreamParser(
            reasoning=reasoning_parser,
            tool_calls=tool_call_parser,
            tools=tools,
            reasoning_started=reasoning_started,
            special_markers=keep.values(),
            **kwargs,
        )
        self._stop = StopStrings(stop)
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.output_ids: list[int] = []  # what the engine generated: the doctor compares the next turn with it
        self.finish_reason: str | None = None

    @property
    def stopped(self) -> bool:
        """A stop string was hit: the caller should end the engine request."""
        return self._stop.hit

    def feed(self, delta: EngineDelta) -> list[Any]:
        if delta.prompt_tokens is not None:
            self.prompt_tokens = delta.prompt_tokens
        if delta.num_cached_tokens is not None:
            self.cached_tokens = delta.num_cached_tokens
        events: list[Any] = []
        if not self._stop.hit:
            self.completion_tokens += len(delta.token_ids)
            self.output_ids.extend(delta.token_ids)
            text = ""
            for tid in delta.token_ids:
                piece = self._decode.step(tid)
                if piece is None:
                    continue
                if not piece[1]:
                    text += piece[0]
                    continue
                # A marker: text before it goes through the stop strings (a stop never spans a special token).
                events.extend(self._text(text))
                text = ""
                if self._stop.hit:
                    break
                held = self._stop.flush()  # a possible partial stop cannot continue past the marker
                events.extend(self._parser.feed(held + piece[0]))
            if not self._stop.hit:
                events.extend(self._text(text))
        if self._stop.hit:
            return events + self._finish("stop")
        if delta.finish_reason is not None:
            return events + self._finish(delta.finish_reason, delta.error)
        return events

    def _text(self, text: str) -> list[Any]:
        text = self._stop.feed(text)
        return self._parser.feed(text) if text else []

    def _finish(self, reason: str, error: str | None = None) -> list[Any]:
        if self.finish_reason is not None:
            return []
        self.finish_reason = reason
        events: list[Any] = []
        tail = self._stop.flush()
        if tail:
            events.extend(self._parser.feed(tail))
        events.extend(self._parser.finish())
        events.append(Usage(self.prompt_tokens, self.completion_tokens, self.cached_tokens))
        events.append(Finish(reason, error, self._stop.matched))  # type: ignore[arg-type]
        return events
