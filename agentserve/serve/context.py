"""What an API handler needs from the ingress replica."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection
from ray.serve.handle import DeploymentHandle

from agentserve.apis.models import Catalog
from agentserve.config import ModelSpec, ServeArgs
from agentserve.protocol import GenerationRequest
from agentserve.serve.auth import caller_scope
from agentserve.serve.hints import authorize_hints
from agentserve.serve.lifecycle import ParseOptions, RequestLifecycle, RequestPath
from agentserve.serve.request_id import current_request_id, new_request_id


@dataclass(frozen=True)
class IngressContext:
    args: ServeArgs
    catalog: Catalog
    tokenizer: Any
    path: RequestPath
    preprocessor: DeploymentHandle

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
