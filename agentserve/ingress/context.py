"""What an API handler needs from the ingress replica."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection
from ray.serve.handle import DeploymentHandle

from agentserve.apis.models import Catalog, Served
from agentserve.config import ModelSpec, ServeArgs
from agentserve.protocol import GenerationRequest
from agentserve.protocol.cluster import ModelAdapters
from agentserve.protocol.errors import RequestError
from agentserve.ingress.middleware.auth import caller_scope
from agentserve.ingress.hints import authorize_hints
from agentserve.ingress.lifecycle import ParseOptions, RequestLifecycle, RequestPath
from agentserve.ingress.middleware.request_id import current_request_id, new_request_id

logger = logging.getLogger("ray.serve")


@dataclass(frozen=True)
class IngressContext:
    args: ServeArgs
    catalog: Catalog
    path: RequestPath
    preprocessor: DeploymentHandle

    async def lookup(self, name: str) -> Served:
        """`catalog.lookup`, and on a miss the LoRA adapters loaded at run time through another Ingress replica
        (the Router keeps them): learnt once, then one dict lookup as every other name."""
        try:
            return self.catalog.lookup(name)
        except RequestError as err:
            if err.kind != "not_found":
                raise
            if not await self.refresh_adapters():
                raise
        return self.catalog.lookup(name)

    async def refresh_adapters(self) -> int:
        """Add the Router's run-time adapters this replica's catalog lacks; how many were new (0 while the Router
        is unreachable: the catalog answers from what it knows)."""
        try:
            runtime: tuple[ModelAdapters, ...] = await self.path.routers.to_primary("adapters", None, False)
        except Exception:
            logger.warning("could not fetch run-time LoRA adapters from the router", exc_info=True)
            return 0
        return sum(self.catalog.add_adapter(entry.model, spec) for entry in runtime for spec in entry.adapters)

    def tokenizer_for(self, model: ModelSpec) -> Any:
        """The tokenizer of a catalog model (the ingress detokenizes and counts with it)."""
        return self.path.tokenizer_for(model.id)

    @staticmethod
    def request_id() -> str:
        """The server's id for this request (the client's `x-request-id` is only a label)."""
        return current_request_id() or new_request_id()

    def authorized_hints(self, gen: GenerationRequest) -> GenerationRequest:
        return authorize_hints(gen, self.args.router.priority_keys)

    def begin(
        self,
        request: HTTPConnection,
        gen: GenerationRequest,
        model: ModelSpec,
        options: ParseOptions,
        *,
        api: str,
        arrived: float,
        warm_only: bool = False,
    ) -> RequestLifecycle:
        return RequestLifecycle(
            self.path,
            gen,
            model,
            options,
            api=api,
            scope=caller_scope(),
            arrived=arrived,
            client_request_id=request.headers.get("x-client-request-id") or request.headers.get("x-request-id"),
            warm_only=warm_only,
        )
