"""The model catalog in OpenAI's /v1/models shape; resolving a requested id or alias."""

from __future__ import annotations

from typing import Any

from agentserve.config import ModelSpec
from agentserve.protocol.errors import RequestError

_CREATED = 1735689600  # fixed: the catalog does not change between restarts


class Catalog:
    def __init__(self, models: list[ModelSpec]) -> None:
        self._by_name = {name: m for m in models for name in m.names()}
        self._models = models

    def resolve(self, name: str) -> ModelSpec:
        model = self._by_name.get(name)
        # Provider-prefixed or doubly slashed ids (`openai/openai/gpt-5.5`, `hosted_vllm/smollm2`)
        # resolve to the entry named by their longest known suffix.
        parts = name.split("/")
        for i in range(1, len(parts)):
            if model is not None:
                break
            model = self._by_name.get("/".join(parts[i:]))
        if model is None:
            raise RequestError(
                "not_found",
                f"The model '{name}' does not exist or you do not have access to it.",
                param="model",
                code="model_not_found",
            )
        return model

    def _card(self, name: str, model: ModelSpec) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": _CREATED,
            "owned_by": model.owned_by,
            "root": model.id,
            "parent": None,
            "max_model_len": model.context_window,
        }

    @property
    def models(self) -> list[ModelSpec]:
        return list(self._models)

    def list_body(self) -> dict[str, Any]:
        return {"object": "list", "data": [self._card(n, m) for n, m in self._by_name.items()]}

    def model_body(self, name: str) -> dict[str, Any]:
        return self._card(name, self.resolve(name))
