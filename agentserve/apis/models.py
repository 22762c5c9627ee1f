"""The model catalog: resolving a requested id, alias or adapter id to what serves it; OpenAI's /v1/models shape."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from agentserve.config import LoraAdapterSpec, ModelSpec
from agentserve.protocol.errors import RequestError

_CREATED = 1735689600  # fixed: the catalog does not change between restarts


@dataclass(frozen=True, slots=True)
class Served:
    """What a requested name resolves to: a catalog model, and the LoRA adapter on it (None: the base model)."""

    model: ModelSpec
    adapter: LoraAdapterSpec | None = None

    @property
    def id(self) -> str:
        """The served id: the adapter's, else the model's (what GenerationRequest.model carries past the ingress)."""
        return self.adapter.id if self.adapter is not None else self.model.id


class Catalog:
    """Every served name (model ids, aliases, adapter ids and their aliases) -> Served: one dict lookup a request."""

    def __init__(self, models: list[ModelSpec] | tuple[ModelSpec, ...]) -> None:
        self._models = list(models)
        self._by_name: dict[str, Served] = {}
        for m in self._models:
            base = Served(m)
            self._by_name.update((name, base) for name in m.names())
            for a in m.adapters:
                self._by_name.update((name, Served(m, a)) for name in a.names())
        self._lock = threading.Lock()

    def add_adapter(self, model_id: str, adapter: LoraAdapterSpec) -> bool:
        """Serve an adapter loaded at run time under its names; False if it is known already. Copy-on-write under
        a lock: lookups on other threads read the old or the new dict, never a half-updated one."""
        with self._lock:
            if adapter.id in self._by_name:
                return False
            model = next(m for m in self._models if m.id == model_id)
            by_name = dict(self._by_name)
            by_name.update((name, Served(model, adapter)) for name in adapter.names())
            self._by_name = by_name
            return True

    def lookup(self, name: str) -> Served:
        served = self._by_name.get(name)
        # Provider-prefixed or doubly slashed ids (`openai/openai/gpt-5.5`, `hosted_vllm/smollm2`)
        # resolve to the entry named by their longest known suffix.
        parts = name.split("/")
        for i in range(1, len(parts)):
            if served is not None:
                break
            served = self._by_name.get("/".join(parts[i:]))
        if served is None:
            raise RequestError(
                "not_found",
                f"The model '{name}' does not exist or you do not have access to it.",
                param="model",
                code="model_not_found",
            )
        return served

    def resolve(self, name: str) -> ModelSpec:
        """The catalog model that serves `name` (for an adapter id: its base model)."""
        return self.lookup(name).model

    @property
    def default(self) -> ModelSpec:
        """The model a request that names none gets (tokenize, input_tokens): the catalog's first."""
        return self._models[0]

    @property
    def models(self) -> list[ModelSpec]:
        return list(self._models)

    def entries(self) -> list[tuple[str, Served]]:
        """Every served name with what it resolves to, in catalog order (each model, its aliases, its adapters)."""
        return list(self._by_name.items())

    def _card(self, name: str, served: Served) -> dict[str, Any]:
        model = served.model
        return {
            "id": name,
            "object": "model",
            "created": _CREATED,
            "owned_by": model.owned_by,
            "root": served.id,
            # As vLLM lists a LoRA adapter: its base model is the parent.
            "parent": model.id if served.adapter is not None else None,
            "max_model_len": model.context_window,
        }

    def list_body(self) -> dict[str, Any]:
        return {"object": "list", "data": [self._card(n, s) for n, s in self._by_name.items()]}

    def model_body(self, name: str) -> dict[str, Any]:
        return self._card(name, self.lookup(name))
