"""The LoRA adapters loaded at run time (POST /v1/admin/adapters), per catalog model: held by the Router (one
replica), so every Ingress replica and every engine replica that starts later learns them from one place.

A load is claimed first (its names reserved, so two concurrent loads of one id cannot both pass), then committed
once every replica of its model holds it, or released if one could not load it. Engine replicas starting up load
the pending ones too: one that registers while a load is under way would otherwise miss it. Plain Python, in
memory: a restarted Router relearns the adapters from the engine replicas that hold them as they register again
(`adopt`); with none left, they are gone (the catalog's declared `adapters:` are the durable form).

A run-time name must not take over traffic that reaches something today: a name served already, a name whose
provider-prefixed suffix is served (the catalog resolves `hosted_vllm/<id>` and `openai/<id>` to `<id>`, so an
adapter called `openai/main` would capture what reached `main`), and the model names the harnesses send on their
own (Claude Code's `claude-*` and tiers, Codex's `gpt-*` and `o<N>` models). At most `max_runtime` per model: each
holds engine memory until a restart.
"""

from __future__ import annotations

import re

from agentserve.config import LoraAdapterSpec, ModelSpec
from agentserve.protocol.cluster import ModelAdapters
from agentserve.protocol.errors import RequestError


# The last path segment of a name a harness sends without being told (Claude Code's model ids and tier names,
# Codex's and OpenClaw's OpenAI model ids), case-insensitive: a run-time adapter never takes one.
HARNESS_NAMES = re.compile(r"(claude|anthropic|gpt|chatgpt|codex|o\d|opus|sonnet|haiku)([-._:@].*)?$", re.IGNORECASE)


def suffixes(name: str) -> list[str]:
    """`name` and every `/`-suffix of it, longest first: what the catalog's lookup may resolve it by."""
    parts = name.split("/")
    return ["/".join(parts[i:]) for i in range(len(parts)) if parts[i:] != [""]]


class RuntimeAdapters:
    def __init__(self, catalog: tuple[ModelSpec, ...] | list[ModelSpec], *, max_runtime: int = 8) -> None:
        self._max_runtime = max_runtime
        self._declared = {name: m.id for m in catalog for name in m.served_names()}
        self._models = tuple(m.id for m in catalog)  # catalog order: listings come in it
        self._committed: dict[str, dict[str, LoraAdapterSpec]] = {m: {} for m in self._models}
        self._pending: dict[str, dict[str, LoraAdapterSpec]] = {m: {} for m in self._models}

    def _owner(self, name: str) -> str | None:
        """The served name's holder, as `<kind> of <model>`, or None if the name is free."""
        if name in self._declared:
            return f"the catalog ({self._declared[name]})"
        for kind, table in (("loaded", self._committed), ("being loaded", self._pending)):
            for model, specs in table.items():
                if any(name in s.names() for s in specs.values()):
                    return f"an adapter {kind} on {model}"
        return None

    def claim(self, model: str, spec: LoraAdapterSpec) -> None:
        """Reserve the adapter's names for a load on `model`'s replicas; refused if any name is served already."""
        if model not in self._models:
            raise RequestError("not_found", f"model '{model}' is not in the catalog", param="model",
                               code="model_not_found")  # fmt: skip
        for name in spec.names():
            param = "id" if name == spec.id else "aliases"
            for form in suffixes(name):
                owner = self._owner(form)
                if owner is not None:
                    also = "" if form == name else f" (requests for '{name}' reach '{form}' today)"
                    raise RequestError(
                        "invalid_request",
                        f"the name '{form}' is already served by {owner}{also}: load the adapter under a new id",
                        param=param,
                        code="adapter_exists",
                    )
            if HARNESS_NAMES.match(name.rsplit("/", 1)[-1]):
                raise RequestError(
                    "invalid_request",
                    f"'{name}' is a model name agent harnesses send on their own: a run-time adapter cannot take it "
                    "(declare it in the serve config's `adapters:` or `aliases:` to serve it deliberately)",
                    param=param,
                    code="adapter_name_reserved",
                )
        held = len(self._committed[model]) + len(self._pending[model])
        if held >= self._max_runtime:
            raise RequestError(
                "invalid_request",
                f"{model} already has {held} run-time adapters, the most admin.max_runtime_adapters allows: "
                "declare more in the serve config and redeploy",
                code="adapter_limit",
            )
        self._pending[model][spec.id] = spec

    def commit(self, model: str, adapter_id: str) -> None:
        spec = self._pending[model].pop(adapter_id, None)
        if spec is not None:
            self._committed[model][adapter_id] = spec

    def release(self, model: str, adapter_id: str) -> None:
        self._pending.get(model, {}).pop(adapter_id, None)

    def adopt(self, model: str, spec: LoraAdapterSpec) -> bool:
        """An adapter an engine replica reports holding as it registers: after a Router restart this is how the
        registry is relearnt (as the prefix index is, from the replicas). Adopted only if its names are free (a load
        under way, or a clash, is left alone); True if it was new."""
        if model not in self._models or any(self._owner(n) is not None for n in spec.names()):
            return False
        self._committed[model][spec.id] = spec
        return True

    def for_model(self, model: str, *, pending: bool = False) -> list[LoraAdapterSpec]:
        """What a replica of `model` loads as it starts (with `pending`: loads under way too), in load order."""
        out = list(self._committed.get(model, {}).values())
        return out + list(self._pending.get(model, {}).values()) if pending else out

    def committed(self) -> dict[str, list[LoraAdapterSpec]]:
        """Every model's servable run-time adapters (what an Ingress replica adds to its catalog on a miss)."""
        return {m: list(specs.values()) for m, specs in self._committed.items() if specs}

    def listing(self, model: str | None = None, *, pending: bool = False) -> tuple[ModelAdapters, ...]:
        """Router.adapters' answer: one entry for `model` (`for_model`), or one per model with servable run-time
        adapters (`committed`)."""
        if model is not None:
            return (ModelAdapters(model, tuple(self.for_model(model, pending=pending))),)
        return tuple(ModelAdapters(m, tuple(specs)) for m, specs in self.committed().items())
