"""The ingress's HTTP application, built once per replica from its parts: routes, middleware, error envelopes.

Plain Python (no Ray): the Serve deployment (serve/deployments/ingress.py) builds the parts from its handles and
returns `make_app(parts)` as its ASGI app. Everything a request needs hangs off the app it reaches (`app.state`),
nothing off a module.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from ray.exceptions import TaskCancelledError
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentserve import metrics
from agentserve.apis import anthropic, chat_completions, responses
from agentserve.apis.admin_adapters import LoadAdapterRequest
from agentserve.apis.responses.store import ResponseStore
from agentserve.state.upkeep import TotalsRecount
from agentserve.apis.tokenize import DetokenizeRequest, TokenizeRequest
from agentserve.ingress import openapi
from agentserve.ingress.context import IngressContext
from agentserve.ingress.driver import GenerationDriver
from agentserve.ingress.errors import ErrorEnvelopes
from agentserve.ingress.handlers.admin_adapters import AdapterAdmin
from agentserve.ingress.handlers.anthropic_messages import ANTHROPIC_ENVELOPE, AnthropicMessagesHandler
from agentserve.ingress.handlers.chat_completions import ChatCompletionsApi
from agentserve.ingress.handlers.models import ModelsHandler
from agentserve.ingress.handlers.responses import ResponsesHandler
from agentserve.ingress.handlers.responses_socket import ResponsesSocket
from agentserve.ingress.handlers.tokenize import TokenizeHandler
from agentserve.ingress.http import describe_validation
from agentserve.ingress.middleware.auth import AuthMiddleware, KeySet
from agentserve.ingress.middleware.faults import ErrorBoundaryMiddleware
from agentserve.ingress.middleware.limits import KeyLimiter, KeyLimitsMiddleware, Limits
from agentserve.ingress.middleware.request_id import RequestIdMiddleware
from agentserve.protocol.errors import RequestError

logger = logging.getLogger("ray.serve")

# Which API's error envelope a path answers in (longest prefix wins; everything else: OpenAI's).
ROUTE_ENVELOPES = ErrorEnvelopes({"/v1/messages": ANTHROPIC_ENVELOPE})

OPENAPI_BODIES: openapi.Bodies = {
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
}


@dataclass(frozen=True)
class IngressParts:
    """What the app is built from: the request path's context, the Responses store (the state backend), and the
    backend's background upkeep (closed with the app)."""

    ctx: IngressContext
    store: ResponseStore
    upkeep: TotalsRecount | None = None


def make_app(parts: IngressParts) -> FastAPI:
    ctx, envelopes = parts.ctx, ROUTE_ENVELOPES
    args = ctx.args

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if parts.upkeep is not None:
                await asyncio.to_thread(parts.upkeep.close)
            parts.store.close()
            for observer in ctx.path.observers:  # e.g. kept turns still queued are written before the stop
                close = getattr(observer, "close", None)
                if close is not None:
                    await asyncio.to_thread(close)

    app = FastAPI(title="agentserve", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.ctx = ctx
    app.state.envelopes = envelopes
    limiter = KeyLimiter(Limits(args.limits, args.state))
    # Outermost last: request-id -> error boundary -> auth -> per-key limits -> routes.
    app.add_middleware(KeyLimitsMiddleware, limiter=limiter, envelopes=envelopes)
    app.add_middleware(AuthMiddleware, keys=KeySet(args.api_keys), envelopes=envelopes, admin=KeySet(args.admin.keys))
    app.add_middleware(ErrorBoundaryMiddleware, envelopes=envelopes)
    app.add_middleware(RequestIdMiddleware)  # `request-id` on every response
    openapi.install(app, OPENAPI_BODIES)
    _error_handlers(app, envelopes)

    driver = GenerationDriver(ctx)
    chat = ChatCompletionsApi(ctx)
    resp = ResponsesHandler(ctx, parts.store)
    socket = ResponsesSocket(resp, limiter)
    messages = AnthropicMessagesHandler(ctx)
    models = ModelsHandler(ctx, messages)
    tokens = TokenizeHandler(ctx)
    admin = AdapterAdmin(ctx)

    # -- wire APIs ------------------------------------------------------------
    async def chat_completions(request: Request) -> Response:
        return await driver.run(request, chat)

    async def create_response(request: Request) -> Response:
        return await driver.run(request, resp)

    async def create_message(request: Request) -> Response:
        return await driver.run(request, messages)

    app.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"])
    app.add_api_route("/v1/responses", create_response, methods=["POST"])
    app.add_api_websocket_route("/v1/responses", socket.serve)
    app.add_api_route("/v1/responses/input_tokens", resp.input_tokens, methods=["POST"])
    app.add_api_route("/v1/responses/{response_id}", resp.retrieve, methods=["GET"])
    app.add_api_route("/v1/responses/{response_id}", resp.delete, methods=["DELETE"])
    # Matched on the path, so Claude Code's `?beta=true` works.
    app.add_api_route("/v1/messages", create_message, methods=["POST"])
    app.add_api_route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"])

    # -- catalog, tokenize / detokenize (vLLM's shapes, with and without /v1) -------------------------
    app.add_api_route("/v1/models", models.list_models, methods=["GET"])
    app.add_api_route("/v1/models/{model_id:path}", models.get_model, methods=["GET"])
    for prefix in ("", "/v1"):
        app.add_api_route(f"{prefix}/tokenize", tokens.tokenize, methods=["POST"])
        app.add_api_route(f"{prefix}/detokenize", tokens.detokenize, methods=["POST"])

    # -- administration: load a LoRA adapter of a catalog model on all its engine replicas -------------
    # Only with an admin credential (ServeArgs.admin.keys): without one the route does not exist (auth.py too).
    if args.admin.keys:
        app.add_api_route("/v1/admin/adapters", admin.load, methods=["POST"])

    # -- operations: Claude Code's and Codex's connectivity probes get 200 at once, with or without a key --
    async def root() -> Response:
        return JSONResponse({"status": "ok"})

    async def health() -> Response:
        return Response(status_code=200)

    async def metrics_endpoint() -> Response:
        return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)

    app.add_api_route("/", root, methods=["GET", "HEAD"])
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/metrics", metrics_endpoint, methods=["GET"])
    return app


def _error_handlers(app: FastAPI, envelopes: ErrorEnvelopes) -> None:
    async def request_error(request: Request, err: RequestError) -> JSONResponse:
        return envelopes.response(request.url.path, err)

    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return envelopes.response(request.url.path, RequestError("invalid_request", describe_validation(err.errors())))

    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        kind = "not_found" if err.status_code == 404 else "invalid_request"
        resp = envelopes.response(request.url.path, RequestError(kind, str(err.detail)))
        resp.status_code = err.status_code
        return resp

    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        if isinstance(err, TaskCancelledError):  # the client left and Serve cancelled its request: not an error
            logger.debug("request on %s cancelled: the client left", request.url.path)
            return JSONResponse({}, status_code=499)
        logger.exception("unhandled error on %s", request.url.path)
        return envelopes.response(
            request.url.path, RequestError("internal", f"internal error: {type(err).__name__}: {err}")
        )

    app.add_exception_handler(RequestError, request_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, unexpected)
