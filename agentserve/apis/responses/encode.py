"""StreamEvents -> Responses API SSE events (with sequence numbers) and the Response object.

One state machine serves both modes: the non-streaming Response is what the stream's
`response.completed` carries. Items get their ids when opened, so streamed and final ids agree.
A complete call's `output_item.done` leaves the moment its closing marker is decoded.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator, Callable, Iterable

import orjson

from agentserve.apis.responses.decode import LOCAL_SHELL, ToolKind, custom_tool_input
from agentserve.apis.responses.schema import ResponsesRequest
from agentserve.apis.origin import Origin
from agentserve.apis.responses.sealing import SealedReasoning, Sealer
from agentserve.apis.openai_logprobs import openai_logprobs
from agentserve.protocol.events import (
    Finish,
    ReasoningDelta,
    Logprobs,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    ToolCallTruncated,
    Usage,
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class _Item:
    """The output item being streamed: its wire dict and the text gathered so far."""

    __slots__ = ("index", "kind", "body", "text", "call_index")

    def __init__(self, index: int, kind: str, body: dict[str, Any], call_index: int | None = None) -> None:
        self.index = index
        self.kind = kind  # reasoning | message | function_call | custom_tool_call | local_shell_call
        self.body = body
        self.text: list[str] = []
        self.call_index = call_index


class ResponsesEncoder:
    def __init__(
        self,
        *,
        response_id: str,
        request: ResponsesRequest,
        model_name: str,  # as the client asked for it (echoed)
        model_id: str,  # canonical, sealed into encrypted_content
        tool_kinds: dict[str, ToolKind],
        sealer: Sealer,
        origin: Origin,  # the caller and the place of this response's turn: what its reasoning is sealed for
        count_tokens: Callable[[str], int],
        namespaces: dict[str, tuple[str, str]] | None = None,  # model-side name -> (namespace, name)
        sse: bool = True,  # False: each event is one bare JSON document (a WebSocket text frame)
    ) -> None:
        self._sse = sse
        self.id = response_id
        self._namespaces = namespaces or {}
        self._req = request
        self._model_name = model_name
        self._model_id = model_id
        self._kinds = tool_kinds
        self._sealer = sealer
        self._origin = origin
        self._count = count_tokens
        self._summary = bool(request.reasoning and request.reasoning.summary not in (None, "none"))
        self._include_sealed = request.includes_encrypted_reasoning()
        self.created_at = int(time.time())
        self.seq = 0
        self.items: list[dict[str, Any]] = []  # finished items, encrypted_content always sealed (for the store)
        self._open: _Item | None = None
        self._ws = ""  # whitespace-only text not yet attached to a message
        self._reasoning: list[str] = []
        self._pending_logprobs: list[dict[str, Any]] = []  # tokens not yet attached to an output_text delta
        self._text_logprobs: list[dict[str, Any]] = []  # the open message's, for its output_text.done
        self.status = "in_progress"
        self.error: dict[str, Any] | None = None
        self.incomplete: dict[str, Any] | None = None
        self.usage: Usage | None = None
        self.finish: Finish | None = None

    # -- wire helpers ---------------------------------------------------------
    def _ev(self, type_: str, **fields: Any) -> bytes:
        data = {"type": type_, "sequence_number": self.seq, **fields}
        self.seq += 1
        if not self._sse:
            return orjson.dumps(data)
        return b"event: " + type_.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def visible(self, item: dict[str, Any]) -> dict[str, Any]:
        if item.get("type") == "reasoning" and not self._include_sealed:
            return {k: v for k, v in item.items() if k != "encrypted_content"}
        return item

    def _usage_body(self) -> dict[str, Any] | None:
        if self.usage is None:
            return None
        u = self.usage
        return {
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": self._count("".join(self._reasoning))},
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        }

    def response_body(self) -> dict[str, Any]:
        r = self._req
        reasoning = r.reasoning.model_dump() if r.reasoning else {"effort": None, "summary": None}
        tool_choice = r.tool_choice if r.tool_choice is not None else "auto"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "background": False,
            "error": self.error,
            "incomplete_details": self.incomplete,
            "instructions": r.instructions,
            "max_output_tokens": r.max_output_tokens,
            "max_tool_calls": r.max_tool_calls,
            "model": self._model_name,
            "output": [self.visible(i) for i in self.items],
            "parallel_tool_calls": True if r.parallel_tool_calls is None else r.parallel_tool_calls,
            "previous_response_id": r.previous_response_id,
            "prompt_cache_key": r.prompt_cache_key,
            "reasoning": reasoning,
            "safety_identifier": r.safety_identifier,
            "service_tier": r.service_tier or "default",
            "store": True if r.store is None else r.store,
            "temperature": 1.0 if r.temperature is None else r.temperature,
            "text": r.text or {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": tool_choice.model_dump() if hasattr(tool_choice, "model_dump") else tool_choice,
            "tools": [t.model_dump(exclude_none=True) for t in r.tools or []],
            "top_logprobs": r.top_logprobs or 0,
            "top_p": 1.0 if r.top_p is None else r.top_p,
            "truncation": r.truncation or "disabled",
            "usage": self._usage_body(),
            "user": r.user,
            "metadata": r.metadata or {},
        }

    # -- streaming ------------------------------------------------------------
    def start(self) -> list[bytes]:
        return [
            self._ev("response.created", response=self.response_body()),
            self._ev("response.in_progress", response=self.response_body()),
        ]

    async def stream(self, batches: AsyncIterator[list[Any]]) -> AsyncIterator[bytes]:
        yield b"".join(self.start())
        async for batch in batches:
            chunks = self.encode(batch)
            if chunks:
                yield b"".join(chunks)

    def encode(self, events: Iterable[Any]) -> list[bytes]:
        out: list[bytes] = []
        for ev in events:
            if not isinstance(ev, (Logprobs, TextDelta)):
                self._pending_logprobs.clear()  # those tokens were reasoning or a call, not output text
            if isinstance(ev, ReasoningDelta):
                self._reasoning.append(ev.text)
                if self._open is None or self._open.kind != "reasoning":
                    out += self._close()
                    out += self._open_reasoning()
                out.append(self._reasoning_delta(ev.text))
            elif isinstance(ev, TextDelta):
                out += self._text(ev.text)
            elif isinstance(ev, Logprobs):
                self._pending_logprobs.extend(openai_logprobs(ev))
            elif isinstance(ev, ToolCallStart):
                out += self._close()
                out += self._open_call(ev)
            elif isinstance(ev, ToolCallArgsDelta):
                item = self._open
                if item is not None and item.call_index == ev.index:
                    item.text.append(ev.fragment)
                    if item.kind == "function_call":
                        out.append(
                            self._ev(
                                "response.function_call_arguments.delta",
                                item_id=item.body["id"],
                                output_index=item.index,
                                delta=ev.fragment,
                            )
                        )
            elif isinstance(ev, ToolCallEnd):
                out += self._end_call(ev.index, ev.arguments)
            elif isinstance(ev, (ToolCallError, ToolCallTruncated)):
                item = self._open
                if item is not None and item.call_index == ev.index:
                    out += self._close(status="incomplete")
                else:  # no name was read: what the model wrote is shown as text
                    out += self._text(ev.raw)
            elif isinstance(ev, Usage):
                self.usage = ev
            elif isinstance(ev, Finish):
                out += self._close()
                out += self._terminal(ev)
        return out

    # -- items ----------------------------------------------------------------
    def _added(self, kind: str, body: dict[str, Any], call_index: int | None = None) -> bytes:
        self._open = _Item(len(self.items), kind, body, call_index)
        self.items.append(body)  # placeholder at its output_index; replaced when done
        return self._ev("response.output_item.added", output_index=self._open.index, item=self.visible(body))

    def _open_reasoning(self) -> list[bytes]:
        out = [self._added("reasoning", {"id": new_id("rs"), "type": "reasoning", "summary": []})]
        item = self._open
        assert item is not None
        if self._summary:
            part = {"type": "summary_text", "text": ""}
            out.append(
                self._ev(
                    "response.reasoning_summary_part.added",
                    item_id=item.body["id"],
                    output_index=item.index,
                    summary_index=0,
                    part=part,
                )
            )
        else:
            part = {"type": "reasoning_text", "text": ""}
            out.append(
                self._ev(
                    "response.content_part.added",
                    item_id=item.body["id"],
                    output_index=item.index,
                    content_index=0,
                    part=part,
                )
            )
        return out

    def _reasoning_delta(self, text: str) -> bytes:
        item = self._open
        assert item is not None
        item.text.append(text)
        where = {"item_id": item.body["id"], "output_index": item.index}
        if self._summary:
            return self._ev("response.reasoning_summary_text.delta", **where, summary_index=0, delta=text)
        return self._ev("response.reasoning_text.delta", **where, content_index=0, delta=text)

    def _text(self, text: str) -> list[bytes]:
        out: list[bytes] = []
        if self._open is None or self._open.kind != "message":
            if not text.strip():
                self._ws += text
                return out
            out += self._close()
            out += self._open_message()
            text, self._ws = self._ws + text, ""
        item = self._open
        assert item is not None
        item.text.append(text)
        logprobs, self._pending_logprobs = self._pending_logprobs, []
        self._text_logprobs.extend(logprobs)
        out.append(
            self._ev(
                "response.output_text.delta",
                item_id=item.body["id"],
                output_index=item.index,
                content_index=0,
                delta=text,
                logprobs=logprobs,
            )
        )
        return out

    def _open_message(self) -> list[bytes]:
        body = {"id": new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        out = [self._added("message", body)]
        out.append(
            self._ev(
                "response.content_part.added",
                item_id=body["id"],
                output_index=self._open.index,  # type: ignore[union-attr]
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            )
        )
        return out

    def _named(self, body: dict[str, Any], name: str) -> dict[str, Any]:
        """A call of a namespaced tool names it as the client declared it: `namespace` + `name`."""
        if name in self._namespaces:
            body["namespace"], body["name"] = self._namespaces[name]
        else:
            body["name"] = name
        return body

    def _open_call(self, ev: ToolCallStart) -> list[bytes]:
        kind = self._kinds.get(ev.name, "function")
        if kind == "custom":
            body = {
                "id": new_id("ctc"),
                "type": "custom_tool_call",
                "status": "in_progress",
                "call_id": ev.id,
                "name": ev.name,
                "input": "",
            }
            return [self._added("custom_tool_call", self._named(body, ev.name), ev.index)]
        if kind == "local_shell":
            body = {
                "id": new_id("lsh"),
                "type": "local_shell_call",
                "status": "in_progress",
                "call_id": ev.id,
                "action": {"type": "exec", "command": [], "env": {}},
            }
            return [self._added("local_shell_call", body, ev.index)]
        body = {
            "id": new_id("fc"),
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": ev.id,
            "name": ev.name,
        }
        return [self._added("function_call", self._named(body, ev.name), ev.index)]

    def _end_call(self, index: int, arguments: str) -> list[bytes]:
        item = self._open
        if item is None or item.call_index != index:
            return []
        where = {"item_id": item.body["id"], "output_index": item.index}
        out: list[bytes] = []
        body = dict(item.body, status="completed")
        if item.kind == "function_call":
            body["arguments"] = arguments
            out.append(self._ev("response.function_call_arguments.done", **where, name=body["name"], arguments=arguments))
        elif item.kind == "custom_tool_call":
            body["input"] = custom_tool_input(arguments)
            out.append(self._ev("response.custom_tool_call_input.delta", **where, delta=body["input"]))
            out.append(self._ev("response.custom_tool_call_input.done", **where, input=body["input"]))
        else:
            body["action"] = _shell_action(arguments)
        return out + self._done(item, body)

    def _done(self, item: _Item, body: dict[str, Any]) -> list[bytes]:
        self.items[item.index] = body
        self._open = None
        return [self._ev("response.output_item.done", output_index=item.index, item=self.visible(body))]

    def _close(self, status: str = "completed") -> list[bytes]:
        """Finish the open item, if any (a call still open here was cut off or malformed)."""
        item = self._open
        if item is None:
            return []
        text = "".join(item.text)
        where = {"item_id": item.body["id"], "output_index": item.index}
        out: list[bytes] = []
        if item.kind == "reasoning":
            body = {"id": item.body["id"], "type": "reasoning", "summary": []}
            if self._summary:
                part = {"type": "summary_text", "text": text}
                out.append(self._ev("response.reasoning_summary_text.done", **where, summary_index=0, text=text))
                out.append(self._ev("response.reasoning_summary_part.done", **where, summary_index=0, part=part))
                body["summary"] = [part]
            else:
                part = {"type": "reasoning_text", "text": text}
                out.append(self._ev("response.reasoning_text.done", **where, content_index=0, text=text))
                out.append(self._ev("response.content_part.done", **where, content_index=0, part=part))
                body["content"] = [part]
            body["encrypted_content"] = self._sealer.seal(
                SealedReasoning(text=text, model=self._model_id, response_id=self.id, output_index=item.index),
                self._origin,
            )
            return out + self._done(item, body)
        if item.kind == "message":
            logprobs, self._text_logprobs = self._text_logprobs, []
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
            out.append(self._ev("response.output_text.done", **where, content_index=0, text=text, logprobs=logprobs))
            out.append(self._ev("response.content_part.done", **where, content_index=0, part=part))
            return out + self._done(item, dict(item.body, status="completed", content=[part]))
        body = dict(item.body, status=status)
        if item.kind == "function_call":
            body["arguments"] = text
        elif item.kind == "custom_tool_call":
            body["input"] = text
        return out + self._done(item, body)

    def _terminal(self, finish: Finish) -> list[bytes]:
        self.finish = finish
        self._ws = ""
        if finish.reason == "error":
            self.status = "failed"
            self.error = {"code": "server_error", "message": finish.error or "engine error"}
            return [self._ev("response.failed", response=self.response_body())]
        if finish.reason == "length":
            self.status = "incomplete"
            self.incomplete = {"reason": "max_output_tokens"}
            return [self._ev("response.incomplete", response=self.response_body())]
        self.status = "completed"
        return [self._ev("response.completed", response=self.response_body())]

    def failed(self, code: str, message: str) -> list[bytes]:
        """A whole stream for a request that failed before generation (Codex maps `error.code`)."""
        out = self.start()
        self.status = "failed"
        self.error = {"code": code, "message": message}
        return out + [self._ev("response.failed", response=self.response_body())]

    # -- non-streaming ----------------------------------------------------------
    def response(self, events: Iterable[Any]) -> dict[str, Any]:
        self.start()
        self.encode(events)
        return self.response_body()


def _shell_action(arguments: str) -> dict[str, Any]:
    try:
        args = json.loads(arguments)
    except ValueError:
        args = {}
    command = args.get("command") if isinstance(args, dict) else None
    if isinstance(command, str):
        command = ["bash", "-lc", command]
    action: dict[str, Any] = {"type": "exec", "command": command or [], "env": {}}
    for key in ("working_directory", "timeout_ms"):
        if isinstance(args, dict) and key in args:
            action[key] = args[key]
    return action


__all__ = ["LOCAL_SHELL", "ResponsesEncoder", "new_id"]
