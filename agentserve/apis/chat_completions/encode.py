"""StreamEvents -> Chat Completions chunks (SSE) or one chat.completion object."""

from __future__ import annotations

import time
from typing import Any, Iterable

import orjson

from agentserve.apis.openai_logprobs import openai_logprobs

from agentserve.protocol.events import (
    Finish,
    Logprobs,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    ToolCallTruncated,
    Usage,
)


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def usage_body(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }




class ChatEncoder:
    """Encodes one request's events; keeps what the final chunk / object needs."""

    def __init__(
        self,
        *,
        completion_id: str,
        model: str,
        include_usage: bool = False,
        tool_dispatch: bool = False,
    ) -> None:
        self.id = completion_id
        self.model = model
        self.created = int(time.time())
        self._include_usage = include_usage
        self._dispatch = tool_dispatch
        self._calls: dict[int, dict[str, Any]] = {}
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._logprobs: list[dict[str, Any]] | None = None  # every token's, once the engine sent any
        self._pending_logprobs: list[dict[str, Any]] = []  # streamed: not yet attached to a chunk
        self.usage: Usage | None = None
        self.finish: Finish | None = None

    # -- shared bookkeeping -------------------------------------------------
    def _track(self, ev: Any) -> None:
        if isinstance(ev, TextDelta):
            self._text.append(ev.text)
        elif isinstance(ev, ReasoningDelta):
            self._reasoning.append(ev.text)
        elif isinstance(ev, ToolCallStart):
            self._calls[ev.index] = {"id": ev.id, "name": ev.name, "arguments": "", "done": False}
        elif isinstance(ev, ToolCallEnd):  # carries the whole arguments text: no need to join the fragments
            call = self._calls[ev.index]
            call["arguments"], call["done"] = ev.arguments, True
        elif isinstance(ev, Usage):
            self.usage = ev
        elif isinstance(ev, Finish):
            self.finish = ev
        elif isinstance(ev, Logprobs):
            entries = openai_logprobs(ev)
            self._logprobs = (self._logprobs or []) + entries
            self._pending_logprobs.extend(entries)
        elif isinstance(ev, (ToolCallError, ToolCallTruncated)):
            # A call the parser could not complete is not a call: the model's text goes back as content
            # (Chat Completions has no way to retract a started call), so nothing it wrote is lost.
            self._calls.pop(ev.index, None)
            self._text.append(ev.raw)

    def finish_reason(self) -> str:
        assert self.finish is not None
        if any(c["done"] for c in self._calls.values()):
            return "tool_calls"
        return "length" if self.finish.reason == "length" else "stop"

    def _tool_call_body(self, index: int) -> dict[str, Any]:
        c = self._calls[index]
        return {
            "index": index,
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }

    # -- streaming ----------------------------------------------------------
    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        logprobs = None
        if self._pending_logprobs:  # the tokens decoded so far, sent with the next chunk
            logprobs, self._pending_logprobs = {"content": self._pending_logprobs, "refusal": None}, []
        return sse(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
                ],
            }
        )

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def encode(self, events: Iterable[Any]) -> list[bytes]:
        out: list[bytes] = []
        for ev in events:
            self._track(ev)
            if isinstance(ev, TextDelta):
                out.append(self._chunk({"content": ev.text}))
            elif isinstance(ev, ReasoningDelta):
                out.append(self._chunk({"reasoning_content": ev.text}))
            elif isinstance(ev, ToolCallStart):
                call = {
                    "index": ev.index,
                    "id": ev.id,
                    "type": "function",
                    "function": {"name": ev.name, "arguments": ""},
                }
                out.append(self._chunk({"tool_calls": [call]}))
            elif isinstance(ev, ToolCallArgsDelta):
                frag = {"index": ev.index, "function": {"arguments": ev.fragment}}
                out.append(self._chunk({"tool_calls": [frag]}))
            elif isinstance(ev, (ToolCallError, ToolCallTruncated)):
                out.append(self._chunk({"content": ev.raw}))
            elif isinstance(ev, ToolCallEnd) and self._dispatch:
                body = {"choice_index": 0, "tool_call": self._tool_call_body(ev.index)}
                out.append(sse(body, event="tool_call_dispatch"))
            elif isinstance(ev, Finish):
                out.extend(self._close())
        return out

    def _close(self) -> list[bytes]:
        assert self.finish is not None
        if self.finish.reason == "error":
            return [self.error_chunk(self.finish.error or "engine error")]
        out = [self._chunk({}, self.finish_reason())]
        if self._include_usage and self.usage is not None:
            out.append(
                sse(
                    {
                        "id": self.id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": usage_body(self.usage),
                    }
                )
            )
        return out

    def error_chunk(self, message: str, *, code: str | None = None) -> bytes:
        return sse({"error": {"message": message, "type": "server_error", "param": None, "code": code}})

    # -- non-streaming ------------------------------------------------------
    def response(self, events: Iterable[Any]) -> dict[str, Any]:
        for ev in events:
            self._track(ev)
        assert self.finish is not None and self.usage is not None
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._text) or None,
            "reasoning_content": "".join(self._reasoning) or None,
        }
        done = [i for i in sorted(self._calls) if self._calls[i]["done"]]
        if done:
            message["tool_calls"] = [
                {k: v for k, v in self._tool_call_body(i).items() if k != "index"} for i in done
            ]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None if self._logprobs is None else {"content": self._logprobs, "refusal": None},
                    "finish_reason": self.finish_reason(),
                }
            ],
            "usage": usage_body(self.usage),
        }
