"""One request's output state in the ingress, as vLLM v1's `RequestState`: engine token deltas -> incremental
detokenizer -> stop strings -> parsers -> StreamEvents, with the logprobs, usage, output ids and the rebuilt
assistant turn of the same request. It is the only owner of a request's output.

Stop strings are applied here, on decoded text, so every engine behaves the same; the caller stops consuming (and
so aborts the engine request) once `stopped`. Special tokens that are markers of the active parsers reach them
(detokenize.py); no other special token does.
"""

from __future__ import annotations

from typing import Any, Sequence

from agentserve.ingress.output.detokenize import Detokenizer, special_tokens
from agentserve.ingress.output.logprobs import logprobs_event
from agentserve.ingress.output.repetition import RepetitionDetector
from agentserve.ingress.output.stop_strings import StopStrings
from agentserve.ingress.output.turn import TurnCollector
from agentserve.config import RepetitionSpec
from agentserve.parsers import StreamParser
from agentserve.protocol import EngineDelta, Turn
from agentserve.protocol.events import Finish, ToolCallError, ToolCallTruncated, Usage


class RequestState:
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
        top_logprobs: int = 0,  # alternatives per token the client asked for (when it asked for logprobs)
        length_finish: str = "length",  # what an engine "length" reports (ModelSpec.max_output_tokens_finish)
        repetition: RepetitionSpec | None = None,  # end a turn that became a loop, as "stop"
    ) -> None:
        self._tokenizer = tokenizer
        self._top_logprobs = top_logprobs
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
        self._length_finish = length_finish
        self._loop = RepetitionDetector(repetition) if repetition is not None else None
        self.cut = False  # the server ended the turn (its cap reported as "stop", or a loop): no end-of-turn token
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.output_ids: list[int] = []  # what the engine generated: the doctor compares the next turn with it
        self.finish_reason: str | None = None
        self._turn = TurnCollector()  # the assistant turn as the client was sent it
        self.unparsed = False  # a tool call the parser could not complete: the turn's tokens are not what was sent

    @property
    def turn(self) -> Turn | None:
        """The assistant turn rebuilt from the events sent: reasoning, text and tool calls in order, client ids."""
        return self._turn.turn()

    @property
    def kept_as_generated(self) -> bool:
        """The turn ended by itself and every byte of it went out as parsed: its generated tokens decode to what the
        client was sent, so they may stand in for the template's rendering of it next turn."""
        return (self.finish_reason == "stop" and not self.stopped and not self.cut and not self.unparsed
                and bool(self.output_ids))  # fmt: skip

    @property
    def loop_period(self) -> int | None:
        """The period of the loop that ended the turn (None: it did not end in one)."""
        return self._loop.period if self._loop is not None and self.cut else None

    @property
    def stopped(self) -> bool:
        """A stop string was hit: the caller should end the engine request."""
        return self._stop.hit

    def feed(self, delta: EngineDelta) -> list[Any]:
        """The events one engine delta makes: logprobs first (an encoder attaches them to the text after them)."""
        events = self._feed(delta)
        if delta.logprobs:
            events = [logprobs_event(self._tokenizer, delta.logprobs, self._top_logprobs), *events]
        if events:
            self._turn.feed(events)
            self.unparsed = self.unparsed or any(isinstance(e, (ToolCallError, ToolCallTruncated)) for e in events)
        return events

    def _feed(self, delta: EngineDelta) -> list[Any]:
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
        if delta.finish_reason is None and self._loop is not None and self._loop.feed(delta.token_ids):
            self.cut = True  # what it wrote went out; the rest would be the loop again
            return events + self._finish("stop")
        if delta.finish_reason == "length" and self._length_finish != "length":
            self.cut = True
            return events + self._finish(self._length_finish)
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
