"""GET /v1/models and /v1/models/{id}: OpenAI's shape, Anthropic's with `anthropic-version`, Codex's with
`client_version`."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from agentserve.apis.codex import models as codex_models
from agentserve.ingress.context import IngressContext
from agentserve.ingress.handlers.anthropic_messages import AnthropicMessagesHandler


class ModelsHandler:
    def __init__(self, ctx: IngressContext, anthropic: AnthropicMessagesHandler) -> None:
        self._ctx = ctx
        self._anthropic = anthropic

    async def list_models(self, request: Request, client_version: str | None = None) -> JSONResponse:
        await self._ctx.refresh_adapters()  # LoRA adapters loaded at run time through any Ingress replica
        if self._anthropic.wants_models(request):  # Anthropic's shape when `anthropic-version` is sent
            return self._anthropic.list_models(request)
        if client_version is not None:  # Codex: {"models": [ModelInfo…]} with an ETag
            body = codex_models.models_body(self._ctx.catalog.models)
            return JSONResponse(body, headers={"ETag": codex_models.etag(body)})
        return JSONResponse(self._ctx.catalog.list_body())

    async def get_model(self, request: Request, model_id: str) -> JSONResponse:
        await self._ctx.refresh_adapters()
        if self._anthropic.wants_models(request):
            return self._anthropic.get_model(model_id)
        return JSONResponse(self._ctx.catalog.model_body(model_id))
