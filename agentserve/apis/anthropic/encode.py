"""StreamEvents -> Anthropic Messages SSE frames, or one `Message` object; one state machine for both.

Stream grammar (harness-contracts A.5): message_start, then per block content_block_start, deltas,
content_block_stop, then message_delta and message_stop; `event:` always equals `data.type`; no `[DONE]`.
- thinking: thinking_delta*, then signature_delta (HMAC over the block's text and its origin) just before its stop;
  with `thinking.display: "omitted"` no thinking_delta, the block's `thinking` stays "", and the signature_delta
  carries the text sealed (apis/anthropic/signature.py), as Anthropic sends such blocks;
- text: text_delta*;
- tool_use: `toolu_` id, input_json_delta whose fragments concatenate to the input object, and its
  content_block_stop as soon as the parser decoded the call's closing marker. Without the client's
  `fine-grained-tool-streaming` beta, the input is sent once it is complete and valid (as Anthropic does);
  with it, fragments go out as they are decoded. With streaming tool dispatch on, a `tool_call_dispatch`
  event with the whole call follows the block's stop.
Usage uses Anthropic's non-overlapping accounting: input_tokens + cache_read_input_tokens = prompt tokens.
"""

from __future__ import annotations

import json
import secrets
import string
from typing import Any, Iterable

import orjson

from agentserve.apis.anthropic.signature import ThinkingSigner
from agentserve.apis.origin import Origin
from agentserve.protocol.events import (
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    ToolCallTruncated,
    Usage,
)

Frame = tuple[str, dict[str, Any]]

_B62 = string.ascii_letters + string.digits


def _rand(n: int) -> str:
    return "".join(secrets.choice(_B62) for _ in range(n))


def message_id() -> str:
    return "msg_01" + _rand(22)


def tool_use_id() -> str:
    return "toolu_01" + _rand(22)


def sse(frame: Frame) -> bytes:
    name, data = frame
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


PING: Frame = ("ping", {"type": "ping"})


def error_frame(error_type: str, message: str) -> Frame:
    return ("error", {"type": "error", "error": {"type": error_type, "message": message}})


def _input_object(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessageEncoder:
    """Encodes one request's events; `content` is the Message's content as built so far."""

    def __init__(
        self,
        *,
        message_id: str,
        model: str,
        prompt_tokens: int,
        signer: ThinkingSigner,
        origin: Origin,  # the caller and the place of this turn: what its thinking is signed for
        tool_dispatch: bool = False,
        live_tool_args: bool = False,
        parallel_tool_use: bool = True,
        emit_thinking: bool = True,  # False when the client disabled thinking: reasoning is parsed, then dropped
        omit_thinking_text: bool = False,  # `thinking.display: "omitted"`: blocks without text, sealed signature
    ) -> None:
        self.id = message_id
        self.model = model
        self.prompt_tokens = prompt_tokens
        self._signer = signer
        self._origin = origin
        self._dispatch = tool_dispatch
        self._live = live_tool_args
        self._parallel = parallel_tool_use
        self._emit_thinking = emit_thinking
        self._omit_thinking = omit_thinking_text
        self._reasoning = ""  # the open thinking block's text when the client gets it omitted
        self.content: list[dict[str, Any]] = []
        self._open: int | None = None  # index of the open block
        self._thinking: list[str] = []  # text of the open thinking block
        self._calls: dict[int, dict[str, Any]] = {}  # parser call index -> {id, name, block}
        self._skipped: set[int] = set()  # calls dropped because parallel tool use is off
        self.completed_calls = 0
        self.usage: Usage | None = None
        self.finish: Finish | None = None

    # -- frames ---------------------------------------------------------------------------------
    def start_frame(self) -> Frame:
        """message_start: the prompt's exact token count is known before any output."""
        return (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": self.id,
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": self._usage_body(prompt=self.prompt_tokens, cached=0, output=1),
                },
            },
        )

    def _usage_body(self, *, prompt: int, cached: int, output: int) -> dict[str, Any]:
        return {
            "input_tokens": prompt - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": output,
            "service_tier": "standard",
        }

    def _final_usage(self) -> dict[str, Any]:
        """The engine's count of the prompt when it reported one (a vision model's images as the tokens vLLM expands
        them to, the basis of its cached count too), else the Preprocessor's (message_start's)."""
        u = self.usage
        prompt = u.prompt_tokens if u and u.prompt_tokens else self.prompt_tokens
        cached = min(u.cached_tokens, prompt) if u else 0
        return self._usage_body(prompt=prompt, cached=cached, output=u.completion_tokens if u else 0)

    def _open_block(self, block: dict[str, Any], out: list[Frame]) -> int:
        self._close_block(out)
        index = len(self.content)
        self.content.append(block)
        self._open = index
        start = dict(block)
        if block["type"] == "tool_use":
            start["input"] = {}
        out.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        return index

    def _close_block(self, out: list[Frame]) -> None:
        if self._open is None:
            return
        index, block = self._open, self.content[self._open]
        if block["type"] == "thinking":
            if self._omit_thinking:
                block["signature"] = self._signer.seal(self._reasoning, self._origin)
                self._reasoning = ""
            else:
                block["signature"] = self._signer.sign(block["thinking"], self._origin)
            delta = {"type": "signature_delta", "signature": block["signature"]}
            out.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        self._open = None

    def _delta(self, delta: dict[str, Any], out: list[Frame]) -> None:
        out.append(("content_block_delta", {"type": "content_block_delta", "index": self._open, "delta": delta}))

    # -- events -> frames ---------------------------------------------------------------------
    def frames(self, events: Iterable[Any]) -> list[Frame]:
        out: list[Frame] = []
        for ev in events:
            if isinstance(ev, TextDelta):
                if not ev.text:
                    continue
                if self._open is None or self.content[self._open]["type"] != "text":
                    self._open_block({"type": "text", "text": ""}, out)
                self.content[self._open]["text"] += ev.text
                self._delta({"type": "text_delta", "text": ev.text}, out)
            elif isinstance(ev, ReasoningDelta):
                if not ev.text or not self._emit_thinking:
                    continue
                if self._open is None or self.content[self._open]["type"] != "thinking":
                    self._open_block({"type": "thinking", "thinking": "", "signature": ""}, out)
                if self._omit_thinking:  # no thinking_delta: the text travels sealed in the signature_delta
                    self._reasoning += ev.text
                    continue
                self.content[self._open]["thinking"] += ev.text
                self._delta({"type": "thinking_delta", "thinking": ev.text}, out)
            elif isinstance(ev, ToolCallStart):
                self._call_start(ev, out)
            elif isinstance(ev, ToolCallArgsDelta):
                call = self._calls.get(ev.index)
                if call is not None and call["block"] is not None and ev.fragment:
                    self._delta({"type": "input_json_delta", "partial_json": ev.fragment}, out)
            elif isinstance(ev, ToolCallEnd):
                self._call_end(ev, out)
            elif isinstance(ev, (ToolCallError, ToolCallTruncated)):
                call = self._calls.pop(ev.index, None)
                if call is not None and call["block"] is not None and self._open == call["block"]:
                    self._close_block(out)  # fine-grained streaming only: the partial input stays as sent
            elif isinstance(ev, Usage):
                self.usage = ev
            elif isinstance(ev, Finish):
                self.finish = ev
                self._close_block(out)
                if ev.reason == "error":  # the engine (replica) failed mid-stream: retryable, as Anthropic's overload
                    out.append(error_frame("overloaded_error", ev.error or "engine error"))
                else:
                    out.append(self._message_delta())
                    out.append(("message_stop", {"type": "message_stop"}))
        return out

    def _call_start(self, ev: ToolCallStart, out: list[Frame]) -> None:
        if not self._parallel and (self.completed_calls or any(c["block"] is not None for c in self._calls.values())):
            self._skipped.add(ev.index)
            return
        call = {"id": ev.id, "name": ev.name, "block": None}
        self._calls[ev.index] = call
        if self._live:
            call["block"] = self._open_block({"type": "tool_use", "id": ev.id, "name": ev.name, "input": {}}, out)

    def _call_end(self, ev: ToolCallEnd, out: list[Frame]) -> None:
        call = self._calls.pop(ev.index, None)
        if call is None:
            return
        if call["block"] is None:  # buffered: the whole, validated input at once
            call["block"] = self._open_block({"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}, out)
            self._delta({"type": "input_json_delta", "partial_json": ev.arguments}, out)
        index = call["block"]
        block = self.content[index]
        block["input"] = _input_object(ev.arguments)
        if self._open == index:
            self._close_block(out)
        self.completed_calls += 1
        if self._dispatch:
            tool_use = {"id": block["id"], "name": block["name"], "input": block["input"]}
            out.append(("tool_call_dispatch", {"type": "tool_call_dispatch", "index": index, "tool_use": tool_use}))

    # -- the end --------------------------------------------------------------------------------
    def stop_reason(self) -> str:
        assert self.finish is not None
        if self.finish.reason == "length":
            return "max_tokens"
        if self.finish.stop_sequence is not None:
            return "stop_sequence"
        if self.completed_calls:
            return "tool_use"
        return "end_turn"

    def _message_delta(self) -> Frame:
        usage = self._final_usage()
        return (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": self.stop_reason(), "stop_sequence": self.finish.stop_sequence},
                "usage": {k: usage[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                                "cache_read_input_tokens", "output_tokens")},
            },
        )

    def message(self) -> dict[str, Any]:
        """The non-streaming `Message`, once Finish has been seen."""
        assert self.finish is not None
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.content,
            "stop_reason": self.stop_reason(),
            "stop_sequence": self.finish.stop_sequence,
            "stop_details": None,
            "usage": self._final_usage(),
        }
