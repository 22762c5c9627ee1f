"""POST /v1/messages, POST /v1/messages/count_tokens, and /v1/models in Anthropic's shape.

Streaming goes through the generation driver (ingress/driver.py) with Anthropic's idiom: `ping` whenever
nothing went out for `keepalive_interval_s` (long prefills, long gaps), errors as an `error` event.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from agentserve import metrics
from agentserve.apis import anthropic
from agentserve.apis.anthropic import errors as anthropic_errors
from agentserve.apis.anthropic import models as anthropic_models
from agentserve.apis.anthropic.decode import system_turns
from agentserve.apis.anthropic.session_memo import MessageMemo
from agentserve.apis.anthropic.encode import PING, MessageEncoder, error_frame, message_id, sse, tool_use_id
from agentserve.apis.media import MediaPolicy
from agentserve.apis.origin import Origin, Origins
from agentserve.config import ModelSpec
from agentserve.preprocess.preamble import strip_anthropic_preamble
from agentserve.protocol import Conversation, Preprocessed
from agentserve.protocol.errors import ContextWindowExceeded, RequestError
from agentserve.ingress.context import IngressContext
from agentserve.ingress.driver import Decoded
from agentserve.ingress.errors import Envelope
from agentserve.ingress.hints import with_hints
from agentserve.ingress.lineage import read_lineage, with_lineage
from agentserve.ingress.http import parse_body
from agentserve.ingress.lifecycle import ParseOptions
from agentserve.ingress.middleware.auth import caller_scope
from agentserve.ingress.middleware.request_id import current_request_id

logger = logging.getLogger("ray.serve")

MAX_BODY_BYTES = 32 * 1024 * 1024  # Anthropic's limit on Messages and count_tokens
FINE_GRAINED_TOOL_STREAMING = "fine-grained-tool-streaming-2025-05-14"


def _envelope(err: RequestError) -> dict[str, Any]:
    return anthropic_errors.error_body(err, current_request_id())


ANTHROPIC_ENVELOPE = Envelope(_envelope, anthropic_errors.status)  # what the app answers /v1/messages* errors in


def anthropic_error_response(err: RequestError) -> JSONResponse:
    return JSONResponse(_envelope(err), status_code=anthropic_errors.status(err))


def _betas(request: Request) -> set[str]:
    return {b.strip() for b in request.headers.get("anthropic-beta", "").split(",") if b.strip()}


class AnthropicWire:
    """Messages stream events as a WireStream."""

    def __init__(self, encoder: MessageEncoder) -> None:
        self._enc = encoder

    def opening(self) -> bytes:
        return sse(self._enc.start_frame())

    def encode(self, events: list[Any]) -> bytes:
        return b"".join(sse(f) for f in self._enc.frames(events))

    def keepalive(self) -> bytes:
        return sse(PING)

    def failure(self, err: RequestError) -> bytes:
        return sse(error_frame(anthropic_errors.error_type(err), err.message))

    def closing(self) -> bytes:
        return b""


class MessageReply:
    """The Messages encoder half: built once the prompt's size is known (message_start carries it)."""

    def __init__(self, signer: anthropic.ThinkingSigner, origin: Origin, *, model: str, **encoder_options: Any) -> None:
        self._signer = signer
        self._origin = origin
        self._model = model
        self._options = encoder_options
        self._enc: MessageEncoder | None = None

    def admission_failed(self, err: RequestError) -> None:
        if isinstance(err, ContextWindowExceeded):
            raise anthropic_errors.context_exceeded(err) from None
        return None

    def admitted(self, prepared: Preprocessed) -> None:
        self._enc = MessageEncoder(
            message_id=message_id(),
            model=self._model,
            prompt_tokens=prepared.prompt_tokens,
            signer=self._signer,
            origin=self._origin,
            **self._options,
        )

    def wire(self) -> AnthropicWire:
        assert self._enc is not None, "admitted() first"
        return AnthropicWire(self._enc)

    async def before_end(self) -> None:
        pass

    def body(self, events: list[Any]) -> dict[str, Any]:
        enc = self._enc
        assert enc is not None, "admitted() first"
        enc.frames(events)
        if enc.finish is None or enc.finish.reason == "error":  # the engine replica failed: retryable
            raise RequestError("overloaded", (enc.finish and enc.finish.error) or "engine error", retry_after=1.0)
        return enc.message()


class AnthropicMessagesHandler:
    def __init__(self, ctx: IngressContext) -> None:
        self._ctx = ctx
        self._signer = anthropic.ThinkingSigner(ctx.args.secret_key, previous=ctx.args.previous_secret_keys)
        self._messages = MessageMemo(ctx.args.kept_turns.conversation_memo_bytes)  # per session: decoded requests

    # -- shared steps ---------------------------------------------------------------------------
    async def _body(self, request: Request, schema: type, validate: Any = None):
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            raise RequestError("too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")
        return await parse_body(request, schema, self._ctx.args.limits, validate)

    def _strip(self, conversation: Conversation, endpoint: str) -> Conversation:
        if not self._ctx.args.strip_anthropic_preamble:
            return conversation
        conversation, stripped = strip_anthropic_preamble(conversation)
        if stripped:
            metrics.PREAMBLE_STRIPPED.labels(endpoint).inc()
        return conversation

    async def _count(self, conversation: Conversation, thinking: bool | None, model_id: str) -> int:
        tokens = await self._ctx.preprocessor.render_tokens.remote(conversation, {}, True, thinking, model_id)
        return len(tokens)

    # -- POST /v1/messages: the generation driver's decoder (ingress/driver.py) ----------------------------
    name = "anthropic"

    @staticmethod
    def status(err: RequestError) -> int:
        return anthropic_errors.status(err)

    async def decode(self, request: Request) -> Decoded:
        caller = caller_scope()
        lineage = read_lineage(request.headers)
        session = lineage.session
        memo_key = (caller, session) if session else None
        validated = await self._body(
            request, anthropic.MessagesRequest, lambda data: self._messages.validate(data, memo_key)
        )
        body = validated.request
        served = await self._ctx.lookup(body.model)  # a catalog model, or a LoRA adapter of one
        origins = Origins(caller)
        media = MediaPolicy.of(served.model)
        gen = anthropic.decode(
            body,
            request_id=self._ctx.request_id(),
            model=served.id,
            signer=self._signer,
            caller=caller,
            session_id=session,
            origins=origins,
            known=validated.known,
            media=media,
            reasons=served.model.reasoning_parser is not None,
        )
        origin = origins.after(gen.conversation.turns)  # the decode walked them: nothing left to hash
        self._messages.remember(memo_key, validated, gen.conversation, system_turns(body), origins.state(), media)
        gen = gen.model_copy(update={"conversation": self._strip(gen.conversation, "messages")})
        gen = self._ctx.authorized_hints(with_lineage(with_hints(gen, request.headers, body), lineage))
        # tool_choice any/tool is passed to the template but cannot be forced on the engine: see HARNESSES.md.
        options = ParseOptions(
            tools=[t.openai_schema() for t in gen.conversation.tools_in_force()],
            parse_tool_calls=gen.conversation.tool_choice != "none",
            # Thinking disabled: still parse the model's reasoning markup (so it never leaks into text); the
            # encoder drops it, as Anthropic returns no thinking blocks then.
            parse_reasoning=True,
            id_factory=tool_use_id,
        )
        reply = MessageReply(
            self._signer,
            origin,
            model=body.model,
            tool_dispatch=bool(body.stream) and self._ctx.args.enable_streaming_tool_dispatch,
            live_tool_args=bool(body.stream) and FINE_GRAINED_TOOL_STREAMING in _betas(request),
            parallel_tool_use=anthropic.parallel_tool_use(body),
            emit_thinking=gen.thinking is not False,
            omit_thinking_text=anthropic.thinking_omitted(body),
        )
        return Decoded(served.model, gen, options, bool(body.stream), reply)

    # -- POST /v1/messages/count_tokens ---------------------------------------------------------
    async def count_tokens(self, request: Request) -> Response:
        status, model_name = 200, "unknown"
        try:
            body = await self._body(request, anthropic.CountTokensRequest)
            served = await self._ctx.lookup(body.model)
            model_name = served.id
            conversation = anthropic.conversation(
                body, self._signer, caller=caller_scope(), media=MediaPolicy.of(served.model)
            )
            conversation = self._strip(conversation, "count_tokens")
            count = await self._count(conversation, anthropic.thinking_switch(body), served.model.id)
            return JSONResponse({"input_tokens": count})
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
        """Every served name of every catalog model (ids, aliases, LoRA adapters), in catalog order."""
        return [(name, served.model) for name, served in self._ctx.catalog.entries()]

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
