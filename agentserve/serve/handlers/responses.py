"""POST /v1/responses, GET and DELETE /v1/responses/{id}."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import TypeAdapter
from ray.serve.handle import DeploymentHandle

from agentserve import metrics
from agentserve.apis import responses
from agentserve.apis.responses.schema import MessageItem
from agentserve.apis.responses.store import StoredResponse
from agentserve.protocol.errors import RequestError
from agentserve.protocol.events import Finish
from agentserve.serve.auth import caller_scope
from agentserve.serve.context import IngressContext
from agentserve.serve.hints import with_hints
from agentserve.serve.http import SSE_HEADERS, parse_body
from agentserve.serve.lifecycle import SSE_COMMENT_KEEPALIVE, ParseOptions

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


class ResponsesHandler:
    def __init__(self, ctx: IngressContext, store: DeploymentHandle | None) -> None:
        self._ctx = ctx
        self._store = store
        self._sealer = responses.Sealer(ctx.args.secret_key, previous=ctx.args.previous_secret_keys)

    async def _history(self, body: responses.ResponsesRequest, owner: str) -> list[Any]:
        if not body.previous_response_id:
            return []
        entry = await self._store.get.remote(body.previous_response_id, owner) if self._store else None
        if entry is None:
            raise _not_found(body.previous_response_id, param="previous_response_id")
        return _ITEMS.validate_python(entry.history)

    async def create(self, request: Request) -> Response:
        arrived = time.perf_counter()
        status, model_name = 200, "unknown"
        try:
            body = await parse_body(request, responses.ResponsesRequest)
            model = self._ctx.catalog.resolve(body.model)
            model_name = model.id
            owner = caller_scope()
            history = await self._history(body, owner)
            decoded = responses.decode(
                body,
                request_id=self._ctx.request_id(),
                model=model.id,
                sealer=self._sealer,
                history=history,
                session_id=request.headers.get("session_id") or request.headers.get("session-id"),
            )
            if "codex" in request.headers.get("originator", "") + request.headers.get("user-agent", "").lower():
                # What Codex resolved for this model shows in what it sends (see docs/HARNESSES.md).
                logger.info(
                    "codex request: model=%s reasoning=%s include=%s parallel_tool_calls=%s tools=%s",
                    body.model,
                    body.reasoning.model_dump(exclude_none=True) if body.reasoning else None,
                    body.include,
                    body.parallel_tool_calls,
                    [getattr(t, "name", t.type) for t in body.tools or []],
                )
            encoder = responses.ResponsesEncoder(
                response_id=responses.new_id("resp"),
                request=body,
                model_name=body.model,
                model_id=model.id,
                tool_kinds=decoded.tool_kinds,
                sealer=self._sealer,
                count_tokens=lambda text: len(self._ctx.tokenizer.encode(text, add_special_tokens=False)) if text else 0,
            )
            gen = self._ctx.authorized_hints(with_hints(decoded.request, request.headers, body))
            conv = gen.conversation
            options = ParseOptions(
                tools=[t.openai_schema() for t in conv.tools],
                parse_tool_calls=conv.tool_choice != "none",
                id_factory=_call_id,
            )
            inputs = history + ([MessageItem(role="user", content=body.input)] if isinstance(body.input, str) else body.input)
            store = body.store is not False and self._store is not None
            async with self._ctx.begin(request, gen, model, options, api="responses", arrived=arrived) as life:
                try:
                    await life.admit()  # 503 + retry-after here, not inside a stream
                except RequestError as err:
                    if body.stream and err.code == "context_length_exceeded":
                        # As OpenAI does: a terminal `response.failed`, which Codex turns into its
                        # context-window error (and compaction) rather than a generic HTTP failure.
                        failed = encoder.failed(err.code, err.message)
                        return StreamingResponse(iter(failed), media_type="text/event-stream", headers=SSE_HEADERS)
                    raise

                async def save() -> None:  # before the terminal event goes out: a follow-up may come at once
                    if store and encoder.status != "failed":
                        await self._save(encoder, inputs, owner)

                if body.stream:
                    return life.streaming_response(ResponsesWire(encoder), before_end=save)
                result = encoder.response(await life.collect())
                if encoder.status == "failed":
                    raise RequestError("overloaded", (encoder.error or {}).get("message", "engine error"), retry_after=1.0)
                await save()
                return JSONResponse(result, headers=life.headers())
        except RequestError as err:
            status = err.status
            raise
        finally:
            metrics.REQUESTS.labels("responses", model_name, str(status)).inc()

    async def _save(self, encoder: responses.ResponsesEncoder, inputs: list[Any], owner: str) -> None:
        history = [i.model_dump(mode="json", exclude_none=True) for i in inputs] + list(encoder.items)
        entry = StoredResponse(owner=owner, response=encoder.response_body(), history=history)
        if not await self._store.put.remote(encoder.id, entry):
            logger.warning("response %s is larger than the whole store; not stored", encoder.id)

    async def retrieve(self, request: Request, response_id: str) -> Response:
        entry = await self._store.get.remote(response_id, caller_scope()) if self._store else None
        if entry is None:
            raise _not_found(response_id)
        return JSONResponse(entry.response)

    async def delete(self, request: Request, response_id: str) -> Response:
        deleted = await self._store.delete.remote(response_id, caller_scope()) if self._store else False
        if not deleted:
            raise _not_found(response_id)
        return JSONResponse({"id": response_id, "object": "response", "deleted": True})
