"""The HTTP ingress: FastAPI routes that decode a wire request, run the pipeline, encode the reply."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, AsyncIterator

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentserve import metrics
from agentserve.apis import chat_completions, openai_errors
from agentserve.apis.models import Catalog
from agentserve.apis.tokenize import DetokenizeRequest, TokenizeRequest, detokenize_body, tokenize_body
from agentserve.config import ServeArgs
from agentserve.preprocess.tokenizer import load_tokenizer
from agentserve.protocol import NamedToolChoice
from agentserve.protocol.errors import RequestError
from agentserve.serve.pipeline import ParseOptions, Pipeline

logger = logging.getLogger("ray.serve")

app = FastAPI(title="agentserve", docs_url=None, redoc_url=None)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _error_response(err: RequestError) -> JSONResponse:
    return JSONResponse(openai_errors.error_body(err), status_code=err.status)


@app.exception_handler(RequestError)
async def _request_error(_: Request, err: RequestError) -> JSONResponse:
    return _error_response(err)


@app.exception_handler(RequestValidationError)
async def _validation_error(_: Request, err: RequestValidationError) -> JSONResponse:
    return _error_response(RequestError("invalid_request", _describe(err.errors())))


@app.exception_handler(StarletteHTTPException)
async def _http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
    kind = {404: "not_found", 405: "invalid_request"}.get(err.status_code, "invalid_request")
    resp = _error_response(RequestError(kind, str(err.detail)))  # type: ignore[arg-type]
    resp.status_code = err.status_code
    return resp


@app.exception_handler(Exception)
async def _unexpected(_: Request, err: Exception) -> JSONResponse:
    logger.exception("unhandled error")
    return _error_response(RequestError("internal", f"internal error: {type(err).__name__}: {err}"))


def _describe(errors: list[Any]) -> str:
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
        parts.append(f"{loc or 'body'}: {e.get('msg')}")
    return "invalid request: " + "; ".join(parts)


async def _parse(request: Request, model: type[BaseModel]) -> Any:
    raw = await request.body()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError("invalid_request", f"request body is not valid JSON: {exc}") from exc
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestError("invalid_request", _describe(exc.errors())) from exc


@serve.deployment(name="Ingress", max_ongoing_requests=2048)
@serve.ingress(app)
class Ingress:
    def __init__(
        self,
        args: dict[str, Any],
        preprocessor: DeploymentHandle,
        router: DeploymentHandle,
        engine: DeploymentHandle,
    ) -> None:
        self._args = ServeArgs.from_any(args)
        self._catalog = Catalog([self._args.model])
        self._tokenizer = load_tokenizer(str(self._args.model.resolve_path()))
        self._preprocessor = preprocessor
        self._pipeline = Pipeline(
            preprocessor=preprocessor, router=router, engine=engine, tokenizer=self._tokenizer
        )

    # -- OpenAI Chat Completions ------------------------------------------
    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        arrived = time.perf_counter()
        status = 200
        model_name = "unknown"
        try:
            body = await _parse(request, chat_completions.ChatCompletionRequest)
            model = self._catalog.resolve(body.model)
            model_name = model.id
            request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
            gen = chat_completions.decode(body, request_id=request_id, model=model.id)
            pre = await self._pipeline.prepare(gen)
            choice = gen.conversation.tool_choice
            options = ParseOptions(
                tools=[t.openai_schema() for t in gen.conversation.tools],
                parse_tool_calls=choice != "none",
            )
            encoder = chat_completions.ChatEncoder(
                completion_id=f"chatcmpl-{request_id}",
                model=body.model,
                include_usage=bool(body.stream_options and body.stream_options.include_usage),
                tool_dispatch=self._args.enable_streaming_tool_dispatch,
                required_tool=choice.name if isinstance(choice, NamedToolChoice) else choice == "required",
            )
            events = self._pipeline.events(pre, model, options, api="chat", arrived=arrived)
            if body.stream:
                return StreamingResponse(
                    encoder.stream(events), media_type="text/event-stream", headers=SSE_HEADERS
                )
            collected = [ev async for batch in events for ev in batch]
            result = encoder.response(collected)
            if encoder.finish is not None and encoder.finish.reason == "error":
                raise RequestError("internal", encoder.finish.error or "engine error")
            missing = encoder.missing_required_call()
            if missing:
                raise RequestError("internal", missing, code="tool_call_missing")
            return JSONResponse(result)
        except RequestError as err:
            status = err.status
            raise
        finally:
            metrics.REQUESTS.labels("chat", model_name, str(status)).inc()

    # -- catalog ------------------------------------------------------------
    @app.get("/v1/models")
    async def list_models(self) -> JSONResponse:
        return JSONResponse(self._catalog.list_body())

    @app.get("/v1/models/{model_id:path}")
    async def get_model(self, model_id: str) -> JSONResponse:
        return JSONResponse(self._catalog.model_body(model_id))

    # -- tokenize / detokenize (vLLM's shapes, with and without /v1) -------
    @app.post("/tokenize")
    @app.post("/v1/tokenize")
    async def tokenize(self, request: Request) -> JSONResponse:
        body = await _parse(request, TokenizeRequest)
        model = self._catalog.resolve(body.model) if body.model else self._args.model
        if body.prompt is not None:
            tokens = await self._preprocessor.tokenize_text.remote(body.prompt, body.add_special_tokens)
        else:
            chat = chat_completions.ChatCompletionRequest.model_validate(
                {"model": model.id, "messages": body.messages, "tools": body.tools}
            )
            gen = chat_completions.decode(chat, request_id="tokenize", model=model.id)
            tokens = await self._preprocessor.render_tokens.remote(
                gen.conversation, dict(body.chat_template_kwargs or {}), body.add_generation_prompt
            )
        strs = self._tokenizer.convert_ids_to_tokens(tokens) if body.return_token_strs else None
        return JSONResponse(tokenize_body(tokens, model.context_window, strs))

    @app.post("/detokenize")
    @app.post("/v1/detokenize")
    async def detokenize(self, request: Request) -> JSONResponse:
        body = await _parse(request, DetokenizeRequest)
        if body.model:
            self._catalog.resolve(body.model)
        vocab = len(self._tokenizer)
        bad = [t for t in body.tokens if not 0 <= t < vocab]
        if bad:
            raise RequestError("invalid_request", f"token ids out of range: {bad[:5]}", param="tokens")
        return JSONResponse(detokenize_body(self._tokenizer.decode(body.tokens)))

    # -- operations -----------------------------------------------------------
    @app.get("/health")
    async def health(self) -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics_endpoint(self) -> Response:
        return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)

