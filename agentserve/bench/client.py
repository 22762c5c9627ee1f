"""One streaming client for the three APIs (Anthropic Messages, OpenAI Responses, Chat Completions).

`SSEParser` turns bytes into server-sent events incrementally; `StreamCollector` reads one API's events into a
`StreamResult`: the arrival time of the first event of each kind (reasoning, text, tool call, finish), of the first
byte and of the content chunks, the usage, the text, the rebuilt Anthropic content blocks, the stop reason and an
error event. Every event is stamped with the arrival time of the network chunk that completed it, taken before
anything is parsed, so parsing costs the client CPU but never delays a timestamp. `stream` / `stream_sync` send one
request with httpx and collect it; `stream_tail` keeps only a stream's last bytes (for throughput benchmarks whose
client must not spend CPU per event) and `usage_from_tail` reads the final usage from them.

Times are seconds from just before the request is sent (`time.perf_counter`).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import httpx

APIS = ("chat", "anthropic", "responses")
PATHS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}
# What the first-event times are kept for: reasoning, text and tool-call deltas, the end of the output (finish reason,
# error), and (Anthropic) the start of a content block.
KINDS = ("reasoning", "text", "tool", "finish", "block_start")
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}  # what Anthropic clients send; pass as headers=


def request(api: str, text: str, *, model: str = "smollm2", max_tokens: int | None = None, stream: bool = True,
            tools: list[dict[str, Any]] | None = None, **extra: Any) -> tuple[str, dict[str, Any]]:
    """(path, body) of a one-message request in `api`'s shape. `tools` must already be in that API's shape."""
    if api == "anthropic":
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens or 256, "stream": stream,
                                "messages": [{"role": "user", "content": text}]}
    elif api == "responses":
        body = {"model": model, "stream": stream, "input": text, "store": False}
        if max_tokens is not None:
            body["max_output_tokens"] = max_tokens
    elif api == "chat":
        body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
    else:
        raise ValueError(f"unknown API {api!r}; one of {APIS}")
    if tools is not None:
        body["tools"] = tools
    body.update(extra)
    return PATHS[api], body


@dataclass
class Event:
    """One server-sent event: its `event:` name (None without one), its data lines joined, its arrival time."""

    event: str | None
    data: str
    t: float = 0.0

    def json(self) -> Any:
        return json.loads(self.data)


class SSEParser:
    """Incremental SSE framing (the WHATWG rules the three APIs use): events end at a blank line, `data:` lines
    join with newlines, comments (`:`) and unknown fields are ignored, LF, CRLF and CR all end lines."""

    def __init__(self) -> None:
        self._buf = ""
        self._decoder = None
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes | str, t: float = 0.0) -> list[Event]:
        if isinstance(chunk, bytes):
            if self._decoder is None:
                import codecs

                self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
            chunk = self._decoder.decode(chunk)
        self._buf += chunk
        out: list[Event] = []
        while True:
            m = _EOL.search(self._buf)
            if m is None:
                break
            if m.group() == "\r" and m.end() == len(self._buf):
                break  # a CR at the end may be the first half of a CRLF: wait for the next byte
            line, self._buf = self._buf[: m.start()], self._buf[m.end():]
            ev = self._line(line, t)
            if ev is not None:
                out.append(ev)
        return out

    def close(self, t: float = 0.0) -> list[Event]:
        """The last event of a stream that ended without its blank line (dispatched, as browsers do not, because a
        benchmark wants to see it)."""
        out = self.feed("\n", t) if self._buf else []
        if self._data:
            out.append(self._dispatch(t))
        return out

    def _line(self, line: str, t: float) -> Event | None:
        if line == "":
            return self._dispatch(t) if self._data or self._event is not None else None
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def _dispatch(self, t: float) -> Event:
        ev = Event(self._event, "\n".join(self._data), t)
        self._event, self._data = None, []
        return ev


_EOL = re.compile(r"\r\n|\n|\r")


def parse_sse(data: bytes | str) -> list[Event]:
    """Every event of a whole recorded stream."""
    p = SSEParser()
    return p.feed(data) + p.close()


@dataclass
class StreamResult:
    api: str
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    first_byte: float | None = None
    first: dict[str, float] = field(default_factory=dict)  # kind -> time of its first event
    content_chunks: int = 0  # text events
    early_text_times: list[float] = field(default_factory=list)  # arrival of the first EARLY text events
    text: str = ""
    first_text: str = ""
    reasoning: str = ""
    usage: dict[str, Any] = field(default_factory=dict)  # the API's own usage object, as last sent
    blocks: list[dict[str, Any]] = field(default_factory=list)  # Anthropic: the content blocks, rebuilt
    stop_reason: str | None = None
    error: str | None = None  # the data of an error event
    events: int = 0
    last_data: str = ""
    done: bool = False  # the API's terminal event arrived
    e2e: float | None = None

    def ttft(self, kinds: Iterable[str] = ("reasoning", "text", "tool")) -> float | None:
        """The time of the first event of any of `kinds`."""
        ts = [self.first[k] for k in kinds if k in self.first]
        return min(ts) if ts else None

    @property
    def output_tokens(self) -> int | None:
        u = self.usage
        return u.get("completion_tokens", u.get("output_tokens"))

    @property
    def prompt_tokens(self) -> int | None:
        u = self.usage
        if "prompt_tokens" in u:
            return u["prompt_tokens"]
        if self.api == "anthropic" and "input_tokens" in u:
            return u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
        return u.get("input_tokens")

    @property
    def cached_tokens(self) -> int | None:
        u = self.usage
        if self.api == "anthropic":
            return u.get("cache_read_input_tokens")
        details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
        return details.get("cached_tokens")


EARLY = 6


class StreamCollector:
    """Reads one API's stream into a StreamResult, chunk by chunk: `feed(chunk, t)`, then `close(t)`."""

    def __init__(self, api: str) -> None:
        if api not in APIS:
            raise ValueError(f"unknown API {api!r}; one of {APIS}")
        self.api = api
        self.result = StreamResult(api)
        self._parser = SSEParser()
        self._partial: dict[int, str] = {}  # Anthropic tool_use input, by block index
        self._by_index: dict[int, dict[str, Any]] = {}

    def feed(self, chunk: bytes | str, t: float) -> None:
        if self.result.first_byte is None and chunk:
            self.result.first_byte = t
        for ev in self._parser.feed(chunk, t):
            self.event(ev)

    def close(self, t: float) -> StreamResult:
        for ev in self._parser.close(t):
            self.event(ev)
        for i, text in self._partial.items():
            self._by_index[i]["input"] = json.loads(text) if text else {}
        self.result.blocks = [self._by_index[i] for i in sorted(self._by_index)]
        self.result.e2e = t
        return self.result

    def _mark(self, kind: str, t: float) -> None:
        self.result.first.setdefault(kind, t)

    def _text(self, piece: str, t: float) -> None:
        r = self.result
        r.content_chunks += 1
        if not r.text:
            r.first_text = piece
        r.text += piece
        if len(r.early_text_times) < EARLY:
            r.early_text_times.append(t)
        self._mark("text", t)

    def event(self, ev: Event) -> None:
        r = self.result
        r.events += 1
        if ev.data == "[DONE]":
            r.done = True
            return
        r.last_data = ev.data
        try:
            obj = ev.json()
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        getattr(self, f"_{self.api}")(ev.event or obj.get("type"), obj, ev.t)

    def _chat(self, _name: str | None, obj: dict[str, Any], t: float) -> None:
        r = self.result
        if "error" in obj and not obj.get("choices"):
            r.error = json.dumps(obj["error"])
            self._mark("finish", t)
        for ch in obj.get("choices") or []:
            delta = ch.get("delta") or {}
            if delta.get("reasoning_content"):
                r.reasoning += delta["reasoning_content"]
                self._mark("reasoning", t)
            if delta.get("content"):
                self._text(delta["content"], t)
            if delta.get("tool_calls"):
                self._mark("tool", t)
            if ch.get("finish_reason"):
                r.stop_reason = ch["finish_reason"]
                self._mark("finish", t)
        if obj.get("usage"):
            r.usage = obj["usage"]

    def _anthropic(self, name: str | None, obj: dict[str, Any], t: float) -> None:
        r = self.result
        if name == "message_start":
            r.usage = dict((obj.get("message") or {}).get("usage") or {})
        elif name == "content_block_start":
            block = dict(obj["content_block"])
            self._by_index[obj["index"]] = block
            self._mark("block_start", t)
        elif name == "content_block_delta":
            d = obj["delta"]
            b = self._by_index.setdefault(obj["index"], {})
            kind = d.get("type")
            if kind == "text_delta":
                b["text"] = b.get("text", "") + d["text"]
                self._text(d["text"], t)
            elif kind == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + d["thinking"]
                r.reasoning += d["thinking"]
                self._mark("reasoning", t)
            elif kind == "signature_delta":
                b["signature"] = d["signature"]
            elif kind == "input_json_delta":
                self._partial[obj["index"]] = self._partial.get(obj["index"], "") + d["partial_json"]
                self._mark("tool", t)
        elif name == "message_delta":
            r.usage = dict(obj.get("usage") or r.usage)  # the final usage (message_start's until then)
            r.stop_reason = (obj.get("delta") or {}).get("stop_reason", r.stop_reason)
            self._mark("finish", t)
        elif name == "message_stop":
            r.done = True
        elif name == "error":
            r.error = json.dumps(obj.get("error", obj))
            self._mark("finish", t)

    def _responses(self, name: str | None, obj: dict[str, Any], t: float) -> None:
        r = self.result
        name = name or ""
        if name.startswith("response.reasoning") and name.endswith(".delta"):
            r.reasoning += obj.get("delta") or ""
            self._mark("reasoning", t)
        elif name == "response.output_text.delta":
            self._text(obj.get("delta") or "", t)
        elif name == "response.function_call_arguments.delta" or (
                name == "response.output_item.added" and (obj.get("item") or {}).get("type") == "function_call"):
            self._mark("tool", t)
        elif name in ("response.completed", "response.incomplete", "response.failed"):
            resp = obj.get("response") or {}
            r.usage = resp.get("usage") or r.usage
            r.stop_reason = resp.get("status")
            r.done = True
            if name == "response.failed":
                r.error = json.dumps(resp.get("error"))
            self._mark("finish", t)
        elif name == "error":
            r.error = json.dumps(obj)
            self._mark("finish", t)


class StreamError(RuntimeError):
    pass


def _check(api: str, result: StreamResult, raise_on_error: bool) -> StreamResult:
    if raise_on_error and result.error is not None:
        raise StreamError(f"{api}: error event: {result.error[:300]}")
    return result


async def stream(client: httpx.AsyncClient, api: str, path: str, body: dict[str, Any] | bytes, *,
                 headers: dict[str, str] | None = None, raise_on_error: bool = True,
                 raise_on_status: bool = True) -> StreamResult:
    """POST one streaming request and collect it (status other than 200: StreamError, or the result with only
    `status` set when raise_on_status is false). `body` as bytes: JSON already encoded, sent as it is."""
    col = StreamCollector(api)
    t0 = time.perf_counter()
    async with client.stream("POST", path, **_payload(body, headers)) as resp:
        col.result.status, col.result.headers = resp.status_code, dict(resp.headers)
        if resp.status_code != 200:
            text = (await resp.aread())[:300]
            if raise_on_status:
                raise StreamError(f"{api}: HTTP {resp.status_code}: {text!r}")
            col.result.last_data = text.decode("utf-8", "replace")
            return col.result
        async for chunk in resp.aiter_bytes():
            col.feed(chunk, time.perf_counter() - t0)
    return _check(api, col.close(time.perf_counter() - t0), raise_on_error)


def _payload(body: dict[str, Any] | bytes, headers: dict[str, str] | None) -> dict[str, Any]:
    """httpx arguments: a dict is JSON-encoded by httpx; bytes (JSON encoded beforehand, so a long body's encoding
    is not timed as the server's) go as they are."""
    if isinstance(body, bytes):
        return {"content": body, "headers": {"content-type": "application/json", **(headers or {})}}
    return {"json": body, "headers": headers}


def stream_sync(client: httpx.Client, api: str, path: str, body: dict[str, Any] | bytes, *,
                headers: dict[str, str] | None = None, raise_on_error: bool = True,
                raise_on_status: bool = True) -> StreamResult:
    """`stream` with a synchronous httpx client."""
    col = StreamCollector(api)
    t0 = time.perf_counter()
    with client.stream("POST", path, **_payload(body, headers)) as resp:
        col.result.status, col.result.headers = resp.status_code, dict(resp.headers)
        if resp.status_code != 200:
            text = resp.read()[:300]
            if raise_on_status:
                raise StreamError(f"{api}: HTTP {resp.status_code}: {text!r}")
            col.result.last_data = text.decode("utf-8", "replace")
            return col.result
        for chunk in resp.iter_bytes():
            col.feed(chunk, time.perf_counter() - t0)
    return _check(api, col.close(time.perf_counter() - t0), raise_on_error)


TAIL_BYTES = 8192


async def stream_tail(client: httpx.AsyncClient, path: str, body: dict[str, Any], *, api: str = "chat",
                      keep: int = TAIL_BYTES) -> bytes:
    """POST one streaming request and keep only the last `keep` bytes (no per-event work in the client)."""
    tail = b""
    async with client.stream("POST", path, json=body) as r:
        if r.status_code != 200:
            raise StreamError(f"{api}: HTTP {r.status_code} {await r.aread()!r}")
        async for chunk in r.aiter_raw():
            tail = (tail + chunk)[-keep:]
    return tail


def usage_from_tail(api: str, tail: bytes) -> int:
    """Output tokens from a stream's final usage (its last events carry it)."""
    text = tail.decode("utf-8", "replace")
    if api == "responses":  # response.completed repeats the whole output: its line outgrows the tail, usage ends it
        found = re.findall(r'"output_tokens":(\d+)', text)
        if found:
            return int(found[-1])
    for line in reversed(text.splitlines()):
        if not line.startswith("data:") or "[DONE]" in line:
            continue
        try:
            d = json.loads(line[5:])
        except ValueError:
            continue
        if api == "chat" and d.get("usage"):
            return d["usage"]["completion_tokens"]
        if api == "anthropic" and d.get("type") == "message_delta":
            return d["usage"]["output_tokens"]
        if api == "responses" and d.get("type") == "response.completed":
            return d["response"]["usage"]["output_tokens"]
    raise StreamError(f"{api}: no usage in the stream's tail: {text[-300:]!r}")
