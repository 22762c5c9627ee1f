"""POST /v1/chat/completions: decode, run the request lifecycle, encode."""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from agentserve import metrics
from agentserve.apis import chat_completions
from agentserve.apis.chat_completions.encode import DONE, ChatEncoder
from agentserve.protocol.errors import RequestError
from agentserve.ingress.context import IngressContext
from agentserve.ingress.hints import with_hints
from agentserve.ingress.http import parse_body
from agentserve.ingress.lifecycle import SSE_COMMENT_KEEPALIVE, ParseOptions


class ChatWire:
    """Chat Completions chunks as a WireStream; keep-alive is an SSE comment (SDKs skip it)."""

    def __init__(self, encoder: ChatEncoder) -> None:
        self._enc = encoder

    def opening(self) -> bytes:
        return self._enc.start()

    def encode(self, events: list[Any]) -> bytes:
        return b"".join(self._enc.encode(events))

    def keepalive(self) -> bytes:
        return SSE_COMMENT_KEEPALIVE

    def failure(self, err: RequestError) -> bytes:
        return self._enc.error_chunk(err.message, code=err.code)

    def closing(self) -> bytes:
        return DONE


class ChatCompletionsHandler:
    def __init__(self, ctx: IngressContext) -> None:
        self._ctx = ctx

    async def create(self, request: Request) -> Response:
        arrived = time.perf_counter()
        status, model_name = 200, "unknown"
        try:
            body = await parse_body(request, chat_completions.ChatCompletionRequest, self._ctx.args.limits)
            served = await self._ctx.lookup(body.model)  # a catalog model, or a LoRA adapter of one
            model, model_name = served.model, served.id
            rid = self._ctx.request_id()
            gen = chat_completions.decode(body, request_id=rid, model=served.id)
            gen = self._ctx.authorized_hints(with_hints(gen, request.headers, body))
            choice = gen.conversation.tool_choice
            options = ParseOptions(
                tools=[t.openai_schema() for t in gen.conversation.tools],
                parse_tool_calls=choice != "none",
            )
            encoder = ChatEncoder(
                completion_id=f"chatcmpl-{rid}",
                model=body.model,
                include_usage=bool(body.stream_options and body.stream_options.include_usage),
                tool_dispatch=self._ctx.args.enable_streaming_tool_dispatch,
            )
            async with self._ctx.begin(request, gen, model, options, api="chat", arrived=arrived) as life:
                await life.admit()  # 4xx / 503 + Retry-After here, never inside a 200 stream
                if body.stream:
                    return life.streaming_response(ChatWire(encoder))
                result = encoder.response(await life.collect())
                if encoder.finish is not None and encoder.finish.reason == "error":
                    raise RequestError("overloaded", encoder.finish.error or "engine error", retry_after=1.0)
                return JSONResponse(result, headers=life.headers())
        except RequestError as err:
            status = err.status
            raise
        finally:
            metrics.REQUESTS.labels("chat", model_name, str(status)).inc()
