"""POST /v1/responses, GET and DELETE /v1/responses/{id}.

The store's calls block on the database: they run in a worker thread, never on the event loop."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import TypeAdapter

from agentserve import metrics
from agentserve.apis import responses
from agentserve.apis.media import MediaPolicy
from agentserve.apis.responses.schema import MessageItem
from agentserve.apis.responses.store import ResponseStore, StoredResponse
from agentserve.config import ModelSpec
from agentserve.protocol import GenerationRequest, Preprocessed
from agentserve.protocol.errors import RequestError
from agentserve.protocol.events import Finish
from agentserve.ingress.middleware.auth import caller_scope
from agentserve.ingress.context import IngressContext
from agentserve.ingress.driver import Decoded
from agentserve.ingress.hints import with_hints
from agentserve.ingress.lineage import read_lineage, with_lineage
from agentserve.ingress.http import SSE_HEADERS, parse_body
from agentserve.ingress.lifecycle import SSE_COMMENT_KEEPALIVE, ParseOptions

logger = logging.getLogger("ray.serve")

_ITEMS = TypeAdapter(list[responses.InputItem])


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _not_found(response_id: str, param: str | None = None) -> RequestError:
    return RequestError(
        "not_found", f"Response with id '{response_id}' not found.", param=param, code="response_not_found"
    )


class ResponsesWire:
    """Responses stream events as a WireStream; keep-alive is an SSE comment (Codex's parser skips it)."""

    def __init__(self, encoder: responses.ResponsesEncoder) -> None:
        self._enc = encoder

    def opening(self) -> bytes:
        return b"".join(self._enc.start())

    def encode(self, events: list[Any]) -> bytes:
        return b"".join(self._enc.encode(events))

    def keepalive(self) -> bytes:
        return SSE_COMMENT_KEEPALIVE

    def failure(self, err: RequestError) -> bytes:
        return b"".join(self._enc.encode([Finish("error", err.message)]))

    def closing(self) -> bytes:
        return b""


@dataclass
class PreparedResponse:
    """One Responses request decoded and ready for the lifecycle; shared by the HTTP and WebSocket transports."""

    body: responses.ResponsesRequest
    model: ModelSpec
    gen: GenerationRequest
    options: ParseOptions
    encoder: responses.ResponsesEncoder
    inputs: list[Any]  # earlier turns' items + this request's: what a follow-up's previous_response_id stands for
    owner: str

    def history(self) -> list[dict[str, Any]]:
        """The items a follow-up naming this response continues from (its output items sealed as stored)."""
        return [i.model_dump(mode="json", exclude_none=True) for i in self.inputs] + list(self.encoder.items)


Recall = Callable[[str], Awaitable[list[Any] | None]]


class ResponseReply:
    """The Responses encoder half over HTTP: stored (unless `store: false`) before its terminal event goes out."""

    def __init__(self, handler: "ResponsesHandler", prep: PreparedResponse) -> None:
        self._handler = handler
        self._prep = prep
        self._body: dict[str, Any] | None = None  # the non-streamed reply, once made

    def admission_failed(self, err: RequestError) -> Response | None:
        if self._prep.body.stream and err.code == "context_length_exceeded":
            # As OpenAI does: a terminal `response.failed`, which Codex turns into its context-window error (and
            # compaction) rather than a generic HTTP failure.
            failed = self._prep.encoder.failed(err.code, err.message)
            return StreamingResponse(iter(failed), media_type="text/event-stream", headers=SSE_HEADERS)
        return None

    def admitted(self, prepared: Preprocessed) -> None:
        pass

    def wire(self) -> ResponsesWire:
        return ResponsesWire(self._prep.encoder)

    async def before_end(self) -> None:  # a follow-up naming this response may come the moment it ends
        if self._prep.body.store is not False and self._prep.encoder.status != "failed":
            if not await self._handler.save(self._prep) and self._body is not None:
                # Generated and answered all the same; the reply says it is not stored, as `store` means in the API.
                self._body["store"] = False

    def body(self, events: list[Any]) -> dict[str, Any]:
        encoder = self._prep.encoder
        result = encoder.response(events)
        if encoder.status == "failed":
            raise RequestError("overloaded", (encoder.error or {}).get("message", "engine error"), retry_after=1.0)
        self._body = result
        return result


class ResponsesHandler:
    def __init__(self, ctx: IngressContext, store: ResponseStore) -> None:
        self._ctx = ctx
        self._store = store
        self._sealer = responses.Sealer(ctx.args.secret_key, previous=ctx.args.previous_secret_keys)

    @property
    def ctx(self) -> IngressContext:
        return self._ctx

    async def _history(self, body: responses.ResponsesRequest, owner: str, recall: Recall | None) -> list[Any]:
        if not body.previous_response_id:
            return []
        items = await recall(body.previous_response_id) if recall is not None else None
        if items is None:
            entry = await asyncio.to_thread(self._store.get, body.previous_response_id, owner)
            items = entry.history if entry is not None else None
        if items is None:
            raise _not_found(body.previous_response_id, param="previous_response_id")
        return _ITEMS.validate_python(items)

    async def prepare(
        self,
        body: responses.ResponsesRequest,
        headers: Mapping[str, str],
        *,
        sse: bool = True,
        recall: Recall | None = None,
    ) -> PreparedResponse:
        """Decode `body` (with the items `previous_response_id` names: `recall`, e.g. a WebSocket connection's own
        responses, first, then the store) and build its encoder."""
        served = await self._ctx.lookup(body.model)  # a catalog model, or a LoRA adapter of one
        model = served.model
        owner = caller_scope()
        history = await self._history(body, owner, recall)
        lineage = read_lineage(headers, body)
        decoded = responses.decode(
            body,
            request_id=self._ctx.request_id(),
            model=served.id,
            sealer=self._sealer,
            caller=owner,
            history=history,
            session_id=lineage.session,
            media=MediaPolicy.of(model),
        )
        if "codex" in headers.get("originator", "") + headers.get("user-agent", "").lower():
            # What Codex resolved for this model shows in what it sends (see docs/HARNESSES.md).
            logger.info(
                "codex request: model=%s reasoning=%s include=%s parallel_tool_calls=%s tools=%s",
                body.model,
                body.reasoning.model_dump(exclude_none=True) if body.reasoning else None,
                body.include,
                body.parallel_tool_calls,
                [getattr(t, "name", t.type) for t in body.tools or []],
            )
        tokenizer = self._ctx.tokenizer_for(model)
        encoder = responses.ResponsesEncoder(
            response_id=responses.new_id("resp"),
            request=body,
            model_name=body.model,
            model_id=served.id,
            tool_kinds=decoded.tool_kinds,
            sealer=self._sealer,
            origin=decoded.origin,
            count_tokens=lambda text: len(tokenizer.encode(text, add_special_tokens=False)) if text else 0,
            namespaces=decoded.namespaces,
            sse=sse,
        )
        gen = self._ctx.authorized_hints(with_lineage(with_hints(decoded.request, headers, body), lineage))
        conv = gen.conversation
        options = ParseOptions(
            tools=[t.openai_schema() for t in conv.tools],
            parse_tool_calls=conv.tool_choice != "none",
            id_factory=_call_id,
        )
        inputs = history + ([MessageItem(role="user", content=body.input)] if isinstance(body.input, str) else body.input)
        return PreparedResponse(body, model, gen, options, encoder, inputs, owner)

    # -- POST /v1/responses: the generation driver's decoder (ingress/driver.py) --------------------------
    name = "responses"

    @staticmethod
    def status(err: RequestError) -> int:
        return err.status

    async def decode(self, request: Request) -> Decoded:
        body = await parse_body(request, responses.ResponsesRequest, self._ctx.args.limits)
        if body.generate is False:
            raise RequestError(
                "invalid_request", "generate: false is only accepted over the WebSocket transport", param="generate"
            )
        prep = await self.prepare(body, request.headers)
        return Decoded(prep.model, prep.gen, prep.options, bool(body.stream), ResponseReply(self, prep))

    async def input_tokens(self, request: Request) -> Response:
        """POST /v1/responses/input_tokens: the prompt this request would render to, counted by the model's own
        tokenizer and template (tools, instructions and `previous_response_id` included)."""
        body = await parse_body(request, responses.InputTokensRequest, self._ctx.args.limits)
        if body.model is None:
            body = body.model_copy(update={"model": self._ctx.catalog.default.id})
        prep = await self.prepare(body, request.headers)
        tokens = await self._ctx.preprocessor.render_tokens.remote(
            prep.gen.conversation, dict(prep.gen.template_kwargs), True, prep.gen.thinking, prep.model.id
        )
        return JSONResponse({"object": "response.input_tokens", "input_tokens": len(tokens)})

    async def save(self, prep: PreparedResponse) -> bool:
        """Store the response; False when it could not be (too large, or the database failed). Never raises: the
        turn was generated and is answered either way; a streamed reply's client learns it only from a later
        `previous_response_id` naming it (404), so the failure is logged with the id and counted."""
        entry = StoredResponse(owner=prep.owner, response=prep.encoder.response_body(), history=prep.history())
        try:
            stored = await asyncio.to_thread(self._store.put, prep.encoder.id, entry)
        except Exception:  # noqa: BLE001 - the database is down or refused the write
            logger.warning("response %s was answered but could not be stored", prep.encoder.id, exc_info=True)
            metrics.RESPONSES_NOT_STORED.labels("failed").inc()
            return False
        if not stored:
            logger.warning("response %s is larger than the store allows; not stored", prep.encoder.id)
            metrics.RESPONSES_NOT_STORED.labels("too_large").inc()
        return stored

    async def retrieve(self, request: Request, response_id: str) -> Response:
        entry = await asyncio.to_thread(self._store.get, response_id, caller_scope())
        if entry is None:
            raise _not_found(response_id)
        return JSONResponse(entry.response)

    async def delete(self, request: Request, response_id: str) -> Response:
        deleted = await asyncio.to_thread(self._store.delete, response_id, caller_scope())
        if not deleted:
            raise _not_found(response_id)
        return JSONResponse({"id": response_id, "object": "response", "deleted": True})
