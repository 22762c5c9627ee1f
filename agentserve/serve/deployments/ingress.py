"""The HTTP ingress deployment: routes each path to its API handler; errors in that API's envelope."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from ray import serve
from ray.exceptions import RayActorError, TaskCancelledError
from ray.serve.handle import DeploymentHandle
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentserve import metrics
from agentserve.apis import anthropic, chat_completions, responses
from agentserve.apis.codex import models as codex_models
from agentserve.apis.admin_adapters import LoadAdapterRequest
from agentserve.apis.models import Catalog
from agentserve.apis.responses.store import ResponseStore
from agentserve.apis.tokenize import DetokenizeRequest, TokenizeRequest, detokenize_body, tokenize_body
from agentserve.config import ResolvedCatalog, ServeArgs
from agentserve.doctor import PrefixDoctor
from agentserve.ingress.output.detokenize import special_tokens
from agentserve.preprocess.tokenizer import load_tokenizer
from agentserve.protocol.errors import RequestError
from agentserve.ingress import openapi
from agentserve.ingress.middleware import auth
from agentserve.ingress.middleware import limits
from agentserve.ingress.middleware.auth import AuthMiddleware
from agentserve.ingress.context import IngressContext
from agentserve.ingress.errors import error_response
from agentserve.ingress.handlers.admin_adapters import AdapterAdmin
from agentserve.ingress.handlers.anthropic_messages import AnthropicMessagesHandler
from agentserve.ingress.handlers.chat_completions import ChatCompletionsHandler
from agentserve.ingress.handlers.responses import ResponsesHandler
from agentserve.ingress.handlers.responses_socket import ResponsesSocket
from agentserve.ingress.middleware.faults import ErrorBoundaryMiddleware
from agentserve.serve.handles import on_this_process
from agentserve.ingress.http import describe_validation, parse_body
from agentserve.ingress.middleware.limits import KeyLimitsMiddleware
from agentserve.ingress.lifecycle import RequestPath
from agentserve.ingress.observers.setup import observers_from
from agentserve.serve.ray_metrics import start_export
from agentserve.ingress.middleware.request_id import RequestIdMiddleware
from agentserve.state import open_backend

logger = logging.getLogger("ray.serve")

app = FastAPI(title="agentserve", docs_url=None, redoc_url=None)
# Outermost last: request-id -> error boundary -> auth -> per-key limits -> routes. Keys and limits are
# configured by Ingress.__init__ (auth.configure, limits.configure), after the app is built.
app.add_middleware(KeyLimitsMiddleware)
app.add_middleware(AuthMiddleware)
app.add_middleware(ErrorBoundaryMiddleware)
app.add_middleware(RequestIdMiddleware)  # `request-id` on every response
openapi.install(
    app,
    {
        ("/v1/chat/completions", "post"): ("Chat", chat_completions.ChatCompletionRequest),
        ("/v1/responses", "post"): ("Responses", responses.ResponsesRequest),
        ("/v1/responses/input_tokens", "post"): ("ResponsesInputTokens", responses.InputTokensRequest),
        ("/v1/messages", "post"): ("Anthropic", anthropic.MessagesRequest),
        ("/v1/messages/count_tokens", "post"): ("AnthropicCount", anthropic.CountTokensRequest),
        ("/tokenize", "post"): ("Tokenize", TokenizeRequest),
        ("/v1/tokenize", "post"): ("Tokenize", TokenizeRequest),
        ("/detokenize", "post"): ("Detokenize", DetokenizeRequest),
        ("/v1/detokenize", "post"): ("Detokenize", DetokenizeRequest),
        ("/v1/admin/adapters", "post"): ("LoadAdapter", LoadAdapterRequest),
    },
)


@app.exception_handler(RequestError)
async def _request_error(request: Request, err: RequestError) -> JSONResponse:
    return error_response(request.url.path, err)


@app.exception_handler(RequestValidationError)
async def _validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
    return error_response(request.url.path, RequestError("invalid_request", describe_validation(err.errors())))


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
    kind = "not_found" if err.status_code == 404 else "invalid_request"
    resp = error_response(request.url.path, RequestError(kind, str(err.detail)))
    resp.status_code = err.status_code
    return resp


@app.exception_handler(Exception)
async def _unexpected(request: Request, err: Exception) -> JSONResponse:
    if isinstance(err, TaskCancelledError):  # the client left and Serve cancelled its request: not an ingress error
        logger.debug("request on %s cancelled: the client left", request.url.path)
        return JSONResponse({}, status_code=499)
    logger.exception("unhandled error on %s", request.url.path)
    return error_response(
        request.url.path, RequestError("internal", f"internal error: {type(err).__name__}: {err}")
    )


# Bounded queue in front of the ingress (Serve answers 503 past it); in-flight streams get a minute to drain.
@serve.deployment(name="Ingress", max_ongoing_requests=2048, max_queued_requests=1024, graceful_shutdown_timeout_s=60)
@serve.ingress(app)
class Ingress:
    def __init__(
        self,
        args: dict[str, Any],
        catalog: dict[str, Any],
        preprocessor: DeploymentHandle,
        router: DeploymentHandle,
        engines: dict[str, DeploymentHandle],  # per catalog model id
    ) -> None:
        config = ServeArgs.from_any(args)
        resolved = ResolvedCatalog.from_any(catalog)
        preprocessor, router = on_this_process(preprocessor), on_this_process(router)
        engines = {m: on_this_process(h) for m, h in engines.items()}
        auth.configure(config.api_keys)
        limits.configure(config.limits, config.state)
        start_export()  # /metrics shows this replica; Ray's metrics agent gets every replica
        catalog_names = Catalog(resolved.models)
        # One tokenizer per checkpoint (models that share weights share it), read once at start.
        by_path: dict[str, Any] = {}
        tokenizers: dict[str, Any] = {}
        for m in resolved.models:
            path = str(m.resolve_path())
            if path not in by_path:
                by_path[path] = load_tokenizer(path)
            tokenizers[m.id] = by_path[path]
            # The tokenizer's special tokens, read once; the log names those the configured parsers get to see.
            special_tokens(tokenizers[m.id]).kept(m.reasoning_parser, m.tool_call_parser)
        doctor = PrefixDoctor.from_args(config, tokenizers[resolved.default.id])
        self._ctx = IngressContext(
            args=config,
            catalog=catalog_names,
            path=RequestPath(
                config,
                preprocessor=preprocessor,
                router=router,
                engines=engines,
                tokenizers=tokenizers,
                doctor=doctor,
                observers=observers_from(config, resolved, doctor),
                engine_died=lambda exc: isinstance(exc, RayActorError),
            ),
            preprocessor=preprocessor,
        )
        self._chat = ChatCompletionsHandler(self._ctx)
        # The Responses store is the state backend itself (every replica opens it, as the kept turns), not a
        # deployment of its own: one process less at rest and one hop less on a `previous_response_id` turn.
        spec = config.response_store
        self._store = ResponseStore(
            max_entries=spec.max_entries, max_bytes=spec.max_bytes, ttl_s=spec.ttl_s, backend=open_backend(config.state)
        )
        self._responses = ResponsesHandler(self._ctx, self._store)
        self._responses_socket = ResponsesSocket(self._responses)
        self._anthropic = AnthropicMessagesHandler(self._ctx)
        self._admin = AdapterAdmin(self._ctx)

    def __del__(self) -> None:  # Serve's replica shutdown hook
        store = getattr(self, "_store", None)
        if store is not None:
            store.close()

    # -- wire APIs ------------------------------------------------------------
    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        return await self._chat.create(request)

    @app.post("/v1/responses")
    async def create_response(self, request: Request) -> Response:
        return await self._responses.create(request)

    @app.websocket("/v1/responses")
    async def responses_websocket(self, websocket: WebSocket) -> None:
        await self._responses_socket.serve(websocket)

    @app.post("/v1/responses/input_tokens")
    async def count_response_tokens(self, request: Request) -> Response:
        return await self._responses.input_tokens(request)

    @app.get("/v1/responses/{response_id}")
    async def get_response(self, request: Request, response_id: str) -> Response:
        return await self._responses.retrieve(request, response_id)

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(self, request: Request, response_id: str) -> Response:
        return await self._responses.delete(request, response_id)

    # Matched on the path, so Claude Code's `?beta=true` works.
    @app.post("/v1/messages")
    async def anthropic_messages(self, request: Request) -> Response:
        return await self._anthropic.create(request)

    @app.post("/v1/messages/count_tokens")
    async def anthropic_count_tokens(self, request: Request) -> Response:
        return await self._anthropic.count_tokens(request)

    # -- catalog ------------------------------------------------------------
    @app.get("/v1/models")
    async def list_models(self, request: Request, client_version: str | None = None) -> JSONResponse:
        await self._ctx.refresh_adapters()  # LoRA adapters loaded at run time through any Ingress replica
        if self._anthropic.wants_models(request):  # Anthropic's shape when `anthropic-version` is sent
            return self._anthropic.list_models(request)
        if client_version is not None:  # Codex: {"models": [ModelInfo…]} with an ETag
            body = codex_models.models_body(self._ctx.catalog.models)
            return JSONResponse(body, headers={"ETag": codex_models.etag(body)})
        return JSONResponse(self._ctx.catalog.list_body())

    @app.get("/v1/models/{model_id:path}")
    async def get_model(self, request: Request, model_id: str) -> JSONResponse:
        await self._ctx.refresh_adapters()
        if self._anthropic.wants_models(request):
            return self._anthropic.get_model(model_id)
        return JSONResponse(self._ctx.catalog.model_body(model_id))

    # -- tokenize / detokenize (vLLM's shapes, with and without /v1) -------
    @app.post("/tokenize")
    @app.post("/v1/tokenize")
    async def tokenize(self, request: Request) -> JSONResponse:
        body = await parse_body(request, TokenizeRequest)
        catalog = self._ctx.catalog
        served = await self._ctx.lookup(body.model) if body.model else catalog.lookup(catalog.default.id)
        model = served.model  # an adapter tokenizes as its base model
        if body.prompt is not None:
            tokens = await self._ctx.preprocessor.tokenize_text.remote(body.prompt, body.add_special_tokens, model.id)
        else:
            try:
                chat = chat_completions.ChatCompletionRequest.model_validate(
                    {"model": model.id, "messages": body.messages, "tools": body.tools}
                )
            except ValidationError as exc:  # neither `prompt` nor valid `messages`
                raise RequestError("invalid_request", describe_validation(exc.errors())) from exc
            gen = chat_completions.decode(chat, request_id="tokenize", model=model.id)
            tokens = await self._ctx.preprocessor.render_tokens.remote(
                gen.conversation, dict(body.chat_template_kwargs or {}), body.add_generation_prompt, None, model.id
            )
        tokenizer = self._ctx.tokenizer_for(model)
        strs = tokenizer.convert_ids_to_tokens(tokens) if body.return_token_strs else None
        return JSONResponse(tokenize_body(tokens, model.context_window, strs))

    @app.post("/detokenize")
    @app.post("/v1/detokenize")
    async def detokenize(self, request: Request) -> JSONResponse:
        body = await parse_body(request, DetokenizeRequest)
        model = (await self._ctx.lookup(body.model)).model if body.model else self._ctx.catalog.default
        tokenizer = self._ctx.tokenizer_for(model)
        vocab = len(tokenizer)
        bad = [t for t in body.tokens if not 0 <= t < vocab]
        if bad:
            raise RequestError("invalid_request", f"token ids out of range: {bad[:5]}", param="tokens")
        return JSONResponse(detokenize_body(tokenizer.decode(body.tokens)))

    # -- administration -------------------------------------------------------------
    @app.post("/v1/admin/adapters")
    async def load_adapter(self, request: Request) -> JSONResponse:
        """Load a LoRA adapter of a catalog model on all its engine replicas and serve it (handlers/admin_adapters)."""
        return await self._admin.load(request)

    # -- operations -----------------------------------------------------------
    # Claude Code's and Codex's connectivity probes: 200 at once, with or without a key, saying nothing more.
    @app.get("/")
    @app.head("/")
    async def root(self) -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/health")
    async def health(self) -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics_endpoint(self) -> Response:
        return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)
