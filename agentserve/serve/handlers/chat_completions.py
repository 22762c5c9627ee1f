"""POST /v1/chat/completions."""

from __future__ import annotations

import time

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from agentserve import metrics
from agentserve.apis import chat_completions
from agentserve.protocol import NamedToolChoice
from agentserve.protocol.errors import RequestError
from agentserve.serve.context import IngressContext
from agentserve.serve.hints import with_hints
from agentserve.serve.http import SSE_HEADERS, parse_body, request_id
from agentserve.serve.pipeline import ParseOptions


class ChatCompletionsHandler:
    def __init__(self, ctx: IngressContext) -> None:
        self._ctx = ctx

    async def create(self, request: Request) -> Response:
        arrived = time.perf_counter()
        status, model_name = 200, "unknown"
        try:
            body = await parse_body(request, chat_completions.ChatCompletionRequest)
            model = self._ctx.catalog.resolve(body.model)
            model_name = model.id
            rid = request_id(request)
            gen = with_hints(chat_completions.decode(body, request_id=rid, model=model.id), request.headers, body)
            pre = await self._ctx.pipeline.prepare(gen)
            route = await self._ctx.pipeline.admit(pre, gen)  # 503 + Retry-After here, not inside a stream
            choice = gen.conversation.tool_choice
            options = ParseOptions(
                tools=[t.openai_schema() for t in gen.conversation.tools],
                parse_tool_calls=choice != "none",
            )
            encoder = chat_completions.ChatEncoder(
                completion_id=f"chatcmpl-{rid}",
                model=body.model,
                include_usage=bool(body.stream_options and body.stream_options.include_usage),
                tool_dispatch=self._ctx.args.enable_streaming_tool_dispatch,
                required_tool=choice.name if isinstance(choice, NamedToolChoice) else choice == "required",
            )
            events = self._ctx.pipeline.events(pre, model, options, api="chat", arrived=arrived, route=route)
            if body.stream:
                headers = {**SSE_HEADERS, **self._ctx.pipeline.prefix_headers(pre)}
                return StreamingResponse(encoder.stream(events), media_type="text/event-stream", headers=headers)
            headers = self._ctx.pipeline.prefix_headers(pre)
            collected = [ev async for batch in events for ev in batch]
            result = encoder.response(collected)
            if encoder.finish is not None and encoder.finish.reason == "error":
                raise RequestError("overloaded", encoder.finish.error or "engine error", retry_after=1.0)  # retryable
            missing = encoder.missing_required_call()
            if missing:
                raise RequestError("internal", missing, code="tool_call_missing")
            return JSONResponse(result, headers=headers)
        except RequestError as err:
            status = err.status
            raise
        finally:
            metrics.REQUESTS.labels("chat", model_name, str(status)).inc()
