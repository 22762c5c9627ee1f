"""POST /v1/chat/completions: Chat Completions' decoder and encoder for the generation driver (ingress/driver.py)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from agentserve.apis import chat_completions
from agentserve.apis.media import MediaPolicy
from agentserve.apis.chat_completions.encode import DONE, ChatEncoder
from agentserve.protocol import Preprocessed
from agentserve.protocol.errors import RequestError
from agentserve.ingress.context import IngressContext
from agentserve.ingress.driver import Decoded
from agentserve.ingress.hints import with_hints
from agentserve.ingress.lineage import read_lineage, with_lineage
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


class ChatReply:
    def __init__(self, encoder: ChatEncoder) -> None:
        self._enc = encoder

    def admission_failed(self, err: RequestError) -> None:
        return None

    def admitted(self, prepared: Preprocessed) -> None:
        pass

    def wire(self) -> ChatWire:
        return ChatWire(self._enc)

    async def before_end(self) -> None:
        pass

    def body(self, events: list[Any]) -> dict[str, Any]:
        result = self._enc.response(events)
        if self._enc.finish is not None and self._enc.finish.reason == "error":
            raise RequestError("overloaded", self._enc.finish.error or "engine error", retry_after=1.0)
        return result


class ChatCompletionsApi:
    """Chat Completions' decoder and encoder for the generation driver."""

    name = "chat"

    def __init__(self, ctx: IngressContext) -> None:
        self._ctx = ctx

    @staticmethod
    def status(err: RequestError) -> int:
        return err.status

    async def decode(self, request: Request) -> Decoded:
        body = await parse_body(request, chat_completions.ChatCompletionRequest, self._ctx.args.limits)
        served = await self._ctx.lookup(body.model)  # a catalog model, or a LoRA adapter of one
        rid = self._ctx.request_id()
        lineage = read_lineage(request.headers, body)
        gen = chat_completions.decode(
            body, request_id=rid, model=served.id, session_id=lineage.session, media=MediaPolicy.of(served.model)
        )
        gen = self._ctx.authorized_hints(with_lineage(with_hints(gen, request.headers, body), lineage))
        options = ParseOptions(
            tools=[t.openai_schema() for t in gen.conversation.tools],
            parse_tool_calls=gen.conversation.tool_choice != "none",
        )
        encoder = ChatEncoder(
            completion_id=f"chatcmpl-{rid}",
            model=body.model,
            include_usage=bool(body.stream_options and body.stream_options.include_usage),
            tool_dispatch=self._ctx.args.enable_streaming_tool_dispatch,
        )
        return Decoded(served.model, gen, options, bool(body.stream), ChatReply(encoder))
