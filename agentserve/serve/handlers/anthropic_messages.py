"""POST /v1/messages, POST /v1/messages/count_tokens, and /v1/models in Anthropic's shape.

Streaming runs the pipeline in a pump task that feeds a queue; the response generator waits on the queue
with a timeout and sends `ping` whenever nothing went out for `keepalive_interval_s` (long prefills, long
gaps), so idle-timeout clients stay connected. The pipeline's generator is never cancelled mid-`__anext__`:
when the client goes away the pump stops at the next batch and closes the generator, which aborts the
engine request.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any, AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from agentserve import metrics
from agentserve.apis import anthropic
from agentserve.apis.anthropic import errors as anthropic_errors
from agentserve.apis.anthropic import models as anthropic_models
from agentserve.apis.anthropic.encode import PING, MessageEncoder, error_frame, message_id, sse, tool_use_id
from agentserve.config import ModelSpec
from agentserve.preprocess.preamble import strip_anthropic_preamble
from agentserve.protocol import Conversation, GenerationRequest, PreprocessedRequest
from agentserve.protocol.errors import RequestError
from agentserve.serve.context import IngressContext
from agentserve.serve.errors import register_envelope
from agentserve.serve.hints import with_hints
from agentserve.serve.http import SSE_HEADERS, parse_body
from agentserve.serve.pipeline import ParseOptions
from agentserve.serve.request_id import current_request_id, new_request_id

logger = logging.getLogger("ray.serve")

MAX_BODY_BYTES = 32 * 1024 * 1024  # Anthropic's limit on Messages and count_tokens
FINE_GRAINED_TOOL_STREAMING = "fine-grained-tool-streaming-2025-05-14"
_END = object()


def _envelope(err: RequestError) -> dict[str, Any]:
    return anthropic_errors.error_body(err, current_request_id())


register_envelope("/v1/messages", _envelope, anthropic_errors.status)


def anthropic_error_response(err: RequestError) -> JSONResponse:
    return JSONResponse(_envelope(err), status_code=anthropic_errors.status(err))


def _betas(request: Request) -> set[str]:
    return {b.strip() for b in request.headers.get("anthropic-beta", "").split(",") if b.strip()}


class AnthropicMessagesHandler:
    def __init__(self, ctx: IngressContext) -> None:
        self._ctx = ctx
        key = ctx.args.secret_key
        if not key:
            logger.warning("no secret_key in ServeArgs: thinking signatures only verify on this replica")
            key = secrets.token_hex(32)
        self._signer = anthropic.ThinkingSigner(key)
        self._pumps: set[asyncio.Task] = set()

    # -- shared steps ---------------------------------------------------------------------------
    async def _body(self, request: Request, schema: type):
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            raise RequestError("too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")
        return await parse_body(request, schema)

    def _strip(self, conversation: Conversation, endpoint: str) -> Conversation:
        if not self._ctx.args.strip_anthropic_preamble:
            return conversation
        conversation, stripped = strip_anthropic_preamble(conversation)
        if stripped:
            metrics.PREAMBLE_STRIPPED.labels(endpoint).inc()
        return conversation

    async def _count(self, conversation: Conversation, thinking: bool | None) -> int:
        tokens = await self._ctx.preprocessor.render_tokens.remote(conversation, {}, True, thinking)
        return len(tokens)

    async def _prepare(self, gen: GenerationRequest, model: ModelSpec) -> PreprocessedRequest:
        try:
            return await self._ctx.pipeline.prepare(gen)
        except RequestError as err:
            if err.code != "context_length_exceeded":
                raise
            n = await self._count(gen.conversation, gen.thinking)
            raise anthropic_errors.prompt_too_long(n, model.context_window) from None

    # -- POST /v1/messages ----------------------------------------------------------------------
    async def create(self, request: Request) -> Response:
        arrived = time.perf_counter()
        status, model_name = 200, "unknown"
        try:
            body = await self._body(request, anthropic.MessagesRequest)
            model = self._ctx.catalog.resolve(body.model)
            model_name = model.id
            gen = anthropic.decode(
                body,
                request_id=current_request_id() or new_request_id(),
                model=model.id,
                signer=self._signer,
                session_id=request.headers.get("x-claude-code-session-id"),
            )
            gen = gen.model_copy(update={"conversation": self._strip(gen.conversation, "messages")})
            gen = with_hints(gen, request.headers, body)
            pre = await self._prepare(gen, model)
            route = await self._ctx.pipeline.admit(pre, gen)  # 529 + retry-after here, not inside a stream
            if not pre.parse_reasoning:
                # Thinking disabled: still parse the model's reasoning markup (so it never leaks into text), and
                # drop it in the encoder, as Anthropic returns no thinking blocks then.
                pre = pre.model_copy(update={"parse_reasoning": True})
            # tool_choice any/tool is passed to the template but cannot be forced on the engine: see HARNESSES.md.
            options = ParseOptions(
                tools=[t.openai_schema() for t in gen.conversation.tools],
                parse_tool_calls=gen.conversation.tool_choice != "none",
                id_factory=tool_use_id,
            )
            encoder = MessageEncoder(
                message_id=message_id(),
                model=body.model,
                prompt_tokens=pre.prompt_tokens,
                signer=self._signer,
                tool_dispatch=body.stream and self._ctx.args.enable_streaming_tool_dispatch,
                live_tool_args=body.stream and FINE_GRAINED_TOOL_STREAMING in _betas(request),
                parallel_tool_use=anthropic.parallel_tool_use(body),
                emit_thinking=gen.thinking is not False,
            )
            events = self._ctx.pipeline.events(pre, model, options, api="anthropic", arrived=arrived, route=route)
            prefix = self._ctx.pipeline.prefix_headers(pre)
            if body.stream:
                return StreamingResponse(
                    self._stream(encoder, events),
                    media_type="text/event-stream",
                    headers={**SSE_HEADERS, **prefix},
                )
            encoder.frames([ev async for batch in events for ev in batch])
            if encoder.finish is None or encoder.finish.reason == "error":  # the engine replica failed: retryable
                raise RequestError(
                    "overloaded", (encoder.finish and encoder.finish.error) or "engine error", retry_after=1.0
                )
            return JSONResponse(encoder.message(), headers=prefix)
        except RequestError as err:
            status = anthropic_errors.status(err)
            raise
        finally:
            metrics.REQUESTS.labels("anthropic", model_name, str(status)).inc()

    async def _stream(self, encoder: MessageEncoder, events: AsyncIterator[list[Any]]) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        gone = asyncio.Event()

        async def pump() -> None:
            try:
                async for batch in events:
                    queue.put_nowait(batch)
                    if gone.is_set():
                        break
            except RequestError as err:
                queue.put_nowait(err)
            except Exception as exc:  # noqa: BLE001 - becomes an `error` event, never a torn stream
                logger.exception("anthropic stream failed")
                queue.put_nowait(RequestError("internal", f"stream failed: {type(exc).__name__}: {exc}"))
            finally:
                await events.aclose()  # between items: runs the pipeline's cleanup (engine abort, router release)
                queue.put_nowait(_END)

        task = asyncio.create_task(pump())
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        interval = self._ctx.args.keepalive_interval_s
        getter: asyncio.Future | None = None
        try:
            yield sse(encoder.start_frame())
            while True:
                # asyncio.wait leaves the pending get in place on timeout (wait_for could drop an item on 3.11).
                getter = getter or asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter}, timeout=interval)
                if not done:
                    yield sse(PING)
                    continue
                item, getter = getter.result(), None
                if item is _END:
                    if encoder.finish is None:
                        yield sse(error_frame("api_error", "the generation stream ended early"))
                    return
                if isinstance(item, RequestError):
                    yield sse(error_frame(anthropic_errors.error_type(item), item.message))
                    return
                frames = encoder.frames(item)
                if frames:
                    yield b"".join(sse(f) for f in frames)
                if encoder.finish is not None:
                    return
        finally:
            gone.set()
            if getter is not None:
                getter.cancel()
            if encoder.finish is None and not task.done():
                # The client left (or the stream broke) before the end: abort now, not at the next batch,
                # which during a long prefill may be many seconds away.
                task.cancel()

    # -- POST /v1/messages/count_tokens ---------------------------------------------------------
    async def count_tokens(self, request: Request) -> Response:
        status, model_name = 200, "unknown"
        try:
            body = await self._body(request, anthropic.CountTokensRequest)
            model = self._ctx.catalog.resolve(body.model)
            model_name = model.id
            conversation = self._strip(anthropic.conversation(body, self._signer), "count_tokens")
            return JSONResponse({"input_tokens": await self._count(conversation, anthropic.thinking_switch(body))})
        except RequestError as err:
            status = anthropic_errors.status(err)
            raise
        finally:
            metrics.REQUESTS.labels("anthropic_count_tokens", model_name, str(status)).inc()

    # -- GET /v1/models (when the request carries `anthropic-version`) ----------------------------
    @staticmethod
    def wants_models(request: Request) -> bool:
        return "anthropic-version" in request.headers

    def _entries(self) -> list[tuple[str, ModelSpec]]:
        spec = self._ctx.args.model
        return [(name, spec) for name in spec.names()]

    def list_models(self, request: Request) -> JSONResponse:
        q = request.query_params
        try:
            limit = int(q.get("limit", "20"))
        except ValueError:
            return anthropic_error_response(RequestError("invalid_request", "limit: must be an integer"))
        try:
            body = anthropic_models.list_body(
                self._entries(), limit=limit, after_id=q.get("after_id"), before_id=q.get("before_id")
            )
        except RequestError as err:
            return anthropic_error_response(err)
        return JSONResponse(body)

    def get_model(self, model_id: str) -> JSONResponse:
        try:
            spec = self._ctx.catalog.resolve(model_id)
        except RequestError:
            return anthropic_error_response(RequestError("not_found", f"model: {model_id}"))
        return JSONResponse(anthropic_models.model_info(model_id, spec))
