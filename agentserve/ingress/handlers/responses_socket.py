"""The Responses API over a WebSocket: what Codex uses when its provider sets `supports_websockets = true`.

Codex (0.171) opens `ws://<base_url>/responses` with its usual headers (`Authorization`, `OpenAI-Beta:
responses_websockets=2026-02-06`, `session_id`) and sends one `{"type": "response.create", …request fields}` text
frame at a time. Each is answered with the events the SSE transport sends, one JSON document per text frame, up to
the terminal event; the connection then takes the next. On one connection:

- `previous_response_id` may name any recent response of this connection, stored or not (Codex sends `store: false`
  and then only the items after that response's input and output);
- `generate: false` (Codex's pre-warm when a session starts) prefills the prompt through the normal request path (one
  token, discarded), so the turn that follows finds it in the engine's prefix cache; it is answered with
  `response.created` and a `response.completed` without output, and can be continued with `previous_response_id`.

A request that fails before generation gets `{"type": "error", "status": N, "error": {…}}` (Codex treats the status
as it would an HTTP one); the connection stays usable. Responses are written by the same encoder as over SSE.

Bounds (ServeArgs.limits): a frame larger than max_ws_frame_bytes (or max_body_bytes) is answered with a `too_large`
error frame and dropped at once; frames sent ahead of the one being answered may hold max_ws_queued_bytes and
INBOX frames, past either the connection is closed (1008), so a client cannot park memory here nor, by stopping
to read, make the WebSocket library queue it; a connection with no frame and no response in progress for
ws_idle_timeout_s is closed (1000); one key holds at most max_websockets_per_key connections on this replica (more
are refused with 429 at the handshake).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from typing import Any, Literal

import orjson
from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect

from agentserve import metrics
from agentserve.apis import responses
from agentserve.protocol.errors import RequestError
from agentserve.protocol.events import Finish, Usage
from agentserve.ingress.middleware.auth import current_identity
from agentserve.ingress.errors import ErrorEnvelopes
from agentserve.ingress.middleware.faults import as_request_error
from agentserve.ingress.handlers.responses import PreparedResponse, ResponsesHandler
from agentserve.ingress.http import parse_frame
from agentserve.ingress.middleware.limits import KeyLimiter

logger = logging.getLogger("ray.serve")

PATH = "/v1/responses"
_ACK = re.compile(r'^\s*\{\s*"type"\s*:\s*"response\.processed"')
REMEMBERED = 4  # responses per connection that `previous_response_id` can name without the store
INBOX = 8  # frames read ahead of the one being answered (Codex sends one at a time, and small acknowledgements)
KEEPALIVE = b'{"type":"keepalive"}'
POLICY_VIOLATION = 1008


class TooLarge:
    """In the inbox instead of a frame past the size cap (its text is not kept): answered with an error frame."""

    def __init__(self, size: int, cap: int) -> None:
        self.size, self.cap = size, cap


class Overrun(Exception):
    """The client sent more ahead than the inbox holds."""


class CreateFrame(responses.ResponsesRequest):
    type: Literal["response.create"]


class SocketWire:
    """Responses events as lists of WebSocket text frames (a WireStream for `RequestLifecycle.chunks`)."""

    def __init__(self, encoder: responses.ResponsesEncoder) -> None:
        self._enc = encoder

    def opening(self) -> list[bytes]:
        return self._enc.start()

    def encode(self, events: list[Any]) -> list[bytes]:
        return self._enc.encode(events)

    def keepalive(self) -> list[bytes]:
        # Codex's idle timeout (stream_idle_timeout_ms, 300 s) restarts on every text frame but not on pings, and a
        # cold prefill on CPU can take longer: a frame of a type every client ignores, outside the numbered events.
        return [KEEPALIVE]

    def failure(self, err: RequestError) -> list[bytes]:
        return self._enc.encode([Finish("error", err.message)])

    def closing(self) -> list[bytes]:
        return []


class Inbox:
    """Frames read ahead of the one being answered, bounded in count and bytes; a frame past `frame_cap` is kept
    only as its size. Past either bound `put` raises Overrun (the reader ends and the connection is closed)."""

    def __init__(self, frame_cap: int, max_bytes: int) -> None:
        self.frame_cap, self._max_bytes = frame_cap, max_bytes
        self._queue: asyncio.Queue["str | TooLarge"] = asyncio.Queue()
        self._bytes = 0

    def empty(self) -> bool:
        return self._queue.empty()

    def put(self, text: str) -> None:
        size = len(text)  # characters: a lower bound of the frame's bytes, and what it costs here
        if size > self.frame_cap:
            self.put_too_large(size)
            return
        if self._queue.qsize() >= INBOX or (not self._queue.empty() and self._bytes + size > self._max_bytes):
            raise Overrun(f"{self._queue.qsize()} frames, {self._bytes + size} bytes ahead")
        self._bytes += size
        self._queue.put_nowait(text)

    def put_too_large(self, size: int) -> None:
        if self._queue.qsize() >= INBOX:
            raise Overrun(f"{self._queue.qsize()} frames ahead")
        self._queue.put_nowait(TooLarge(size, self.frame_cap))

    async def get(self) -> "str | TooLarge":
        item = await self._queue.get()
        if isinstance(item, str):
            self._bytes -= len(item)
        return item


def _overran(reader: asyncio.Future) -> bool:
    return reader.done() and not reader.cancelled() and isinstance(reader.exception(), Overrun)


async def _close(ws: WebSocket, code: int, reason: str) -> None:
    try:
        await ws.close(code=code, reason=reason)
    except (RuntimeError, WebSocketDisconnect):  # already closed by the client
        pass


async def _refuse_upgrade(ws: WebSocket, err: RequestError) -> None:
    """Refuse the handshake with the HTTP status of `err` (as the auth middleware refuses one), or 403 where the
    server cannot send an HTTP answer to an upgrade."""
    scope_ext = ws.scope.get("extensions") or {}
    if "websocket.http.response" not in scope_ext:
        await ws.close(code=POLICY_VIOLATION)
        return
    status, body, headers = ErrorEnvelopes().parts(PATH, err)
    raw = orjson.dumps(body)
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    hdrs += [(k.lower().encode(), str(v).encode()) for k, v in (headers or {}).items()]
    await ws.send({"type": "websocket.http.response.start", "status": status, "headers": hdrs})
    await ws.send({"type": "websocket.http.response.body", "body": raw})


def error_frame(err: RequestError) -> str:
    status, body, headers = ErrorEnvelopes().parts(PATH, err)  # the Responses API speaks OpenAI's envelope
    frame: dict[str, Any] = {"type": "error", "status": status, **body}
    if headers:
        frame["headers"] = headers
    return orjson.dumps(frame).decode()


class ResponsesSocket:
    """One WebSocket connection: its frames answered in order, its recent responses remembered."""

    def __init__(self, handler: ResponsesHandler, limiter: KeyLimiter) -> None:
        self._handler = handler
        self._limiter = limiter
        self._open: dict[str, int] = {}  # open connections per key on this replica

    async def serve(self, ws: WebSocket) -> None:
        who = current_identity() or ""
        cap = self._handler.ctx.args.limits.max_websockets_per_key
        if cap is not None and self._open.get(who, 0) >= cap:
            await _refuse_upgrade(ws, RequestError(
                "rate_limit", f"this key already has {cap} open Responses WebSockets here (limits."
                "max_websockets_per_key): close one or use HTTP", retry_after=5))  # fmt: skip
            return
        self._open[who] = self._open.get(who, 0) + 1
        try:
            await self._serve(ws)
        finally:
            self._open[who] -= 1
            if not self._open[who]:
                del self._open[who]

    async def _serve(self, ws: WebSocket) -> None:
        await ws.accept()
        limits = self._handler.ctx.args.limits
        remembered: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        # a frame is a decoded request body: held to the body caps as well
        frame_cap = min(limits.max_ws_frame_bytes, limits.max_body_bytes, limits.max_decompressed_bytes)
        inbox = Inbox(frame_cap, limits.max_ws_queued_bytes)
        reader = asyncio.ensure_future(self._read(ws, inbox))
        turn: asyncio.Future | None = None
        try:
            while True:
                if reader.done():  # the client left (what it sent ahead goes unanswered) or overran
                    if _overran(reader):
                        await _close(ws, POLICY_VIOLATION, "too many frames sent ahead of the response")
                    return
                next_frame = asyncio.ensure_future(inbox.get())
                await asyncio.wait((next_frame, reader), timeout=limits.ws_idle_timeout_s,
                                   return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                if not next_frame.done():  # the client left or overran between responses, or sent nothing for long
                    next_frame.cancel()
                    if not reader.done():
                        await _close(ws, 1000, "idle")
                        return
                    continue  # the top of the loop tells how the reader ended
                turn = asyncio.ensure_future(self._answer(ws, next_frame.result(), remembered))
                await asyncio.wait((turn, reader), return_when=asyncio.FIRST_COMPLETED)
                if not turn.done():  # the client left (or overran) mid-response: end it (the lifecycle releases all)
                    if _overran(reader):
                        await _close(ws, POLICY_VIOLATION, "too many frames sent ahead of the response")
                    return
                if turn.exception() is not None:  # the connection broke while answering
                    if not isinstance(turn.exception(), WebSocketDisconnect):
                        logger.warning("websocket response ended with %r", turn.exception())
                    return
        finally:
            for task in (turn, reader):
                if task is not None and not task.done():
                    task.cancel()
            if turn is not None:
                await asyncio.gather(turn, return_exceptions=True)

    @staticmethod
    async def _read(ws: WebSocket, inbox: "Inbox") -> None:
        """Frames into `inbox` until the client goes (then this task ends: that is how `serve` learns it), or sends
        more ahead than the inbox holds (Overrun). Never waits on the inbox, so the library queues nothing."""
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None and message.get("bytes") is not None:
                    raw = message["bytes"]
                    text = raw.decode("utf-8", "replace") if len(raw) <= inbox.frame_cap else None
                    if text is None:
                        inbox.put_too_large(len(raw))
                        continue
                if text is not None:
                    inbox.put(text)
        except (WebSocketDisconnect, RuntimeError):
            return

    async def _answer(self, ws: WebSocket, text: "str | TooLarge",
                      remembered: OrderedDict[str, list[dict[str, Any]]]) -> None:  # fmt: skip
        if isinstance(text, TooLarge):  # a frame is a request body: the same cap
            err = RequestError("too_large", f"request frame of {text.size} bytes exceeds {text.cap} bytes")
            metrics.REQUESTS.labels("responses_ws", "unknown", str(err.status)).inc()
            await ws.send_text(error_frame(err))
            return
        if _ACK.search(text[:200]):  # newer Codex acknowledges each response; no answer is expected
            return
        arrived = time.perf_counter()
        status, model_name = 200, "unknown"
        held = None
        try:
            try:
                if self._limiter.active():
                    held = await asyncio.to_thread(self._limiter.acquire, current_identity() or "")
                spec = self._handler.ctx.args.limits
                body = await parse_frame(text, CreateFrame, spec)

                async def recall(response_id: str) -> list[Any] | None:
                    return remembered.get(response_id)

                prep = await self._handler.prepare(body, ws.headers, sse=False, recall=recall)
                model_name = prep.gen.model
                await self._run(ws, prep, remembered, arrived)
            except RequestError as err:
                status = err.status
                await ws.send_text(error_frame(err))
            except (WebSocketDisconnect, asyncio.CancelledError):
                raise
            except Exception as exc:  # noqa: BLE001 - this request ends with an error frame; the connection lives
                err = as_request_error(exc)
                status = err.status
                if err.kind == "internal":
                    logger.exception("websocket response failed")
                await ws.send_text(error_frame(err))
        finally:
            if held is not None:
                await asyncio.shield(asyncio.to_thread(self._limiter.release, held))
            metrics.REQUESTS.labels("responses_ws", model_name, str(status)).inc()

    async def _run(
        self,
        ws: WebSocket,
        prep: PreparedResponse,
        remembered: OrderedDict[str, list[dict[str, Any]]],
        arrived: float,
    ) -> None:
        body, encoder = prep.body, prep.encoder
        warm = body.generate is False
        gen = prep.gen
        if warm:  # prefill only: one token through the normal path, so the prompt lands in the prefix cache
            gen = gen.model_copy(update={"sampling": gen.sampling.model_copy(update={"max_tokens": 1})})

        def remember() -> None:
            remembered[encoder.id] = prep.history()
            while len(remembered) > REMEMBERED:
                remembered.popitem(last=False)

        ctx = self._handler.ctx
        api = "responses_prewarm" if warm else "responses_ws"
        async with ctx.begin(ws, gen, prep.model, prep.options, api=api, arrived=arrived, warm_only=warm) as life:
            try:
                await life.admit()
            except RequestError as err:
                if err.code != "context_length_exceeded":
                    raise
                await self._send(ws, encoder.failed(err.code, err.message))  # as over SSE: Codex compacts
                return
            if warm:
                events = await self._collect_alive(ws, life)
                usage = [Usage(e.prompt_tokens, 0, e.cached_tokens) for e in events if isinstance(e, Usage)]
                failed = [e for e in events if isinstance(e, Finish) and e.reason == "error"]
                frames = encoder.start() + encoder.encode(usage + (failed or [Finish("stop")]))
                if not failed:
                    remember()
                await self._send(ws, frames)
                return

            async def before_end() -> None:  # before the terminal event: Codex sends its follow-up at once
                if encoder.status == "failed":
                    return
                remember()
                if body.store is not False:
                    await self._handler.save(prep)

            chunks = life.chunks(SocketWire(encoder), before_end=before_end)
            try:
                async for frames in chunks:
                    await self._send(ws, frames)
            finally:
                await chunks.aclose()

    async def _collect_alive(self, ws: WebSocket, life: Any) -> list[Any]:
        """The pre-warm's events, with keep-alive frames while its prefill runs."""
        collecting = asyncio.ensure_future(life.collect())
        try:
            while True:
                done, _ = await asyncio.wait((collecting,), timeout=self._handler.ctx.args.keepalive_interval_s)
                if done:
                    return collecting.result()
                await ws.send_text(KEEPALIVE.decode())
        finally:
            if not collecting.done():
                collecting.cancel()

    @staticmethod
    async def _send(ws: WebSocket, frames: list[bytes]) -> None:
        for frame in frames:
            await ws.send_text(frame.decode())
