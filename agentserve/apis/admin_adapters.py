"""The admin route's wire shape: POST /v1/admin/adapters loads a LoRA adapter of a catalog model at run time.

OpenAI-style (errors in OpenAI's envelope); the body names the base model and the adapter as the catalog's
`adapters:` entries do, so a run-time adapter is the same LoraAdapterSpec a declared one is."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentserve.config import LoraAdapterSpec

_NAME = Field(min_length=1, max_length=256, pattern=r"^\S+$")  # a served model name: no whitespace


class LoadAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = _NAME  # the catalog model (id or alias) whose engine loads the adapter
    id: str = _NAME  # the id the adapter is served under
    path: str = Field(min_length=1, max_length=4096)  # PEFT adapter directory, as the engine's host sees it
    aliases: tuple[str, ...] = Field(default=(), max_length=64)

    @model_validator(mode="after")
    def _distinct(self) -> "LoadAdapterRequest":
        names = (self.id, *self.aliases)
        for a in self.aliases:
            if not a or len(a) > 256 or any(c.isspace() for c in a):
                raise ValueError(f"alias {a!r} must be 1-256 characters without whitespace")
        if len(set(names)) != len(names):
            raise ValueError("`id` and `aliases` must be distinct names")
        return self

    def spec(self) -> LoraAdapterSpec:
        return LoraAdapterSpec(id=self.id, path=self.path, aliases=self.aliases)


def loaded_body(model: str, spec: LoraAdapterSpec, replicas: list[str]) -> dict[str, Any]:
    """The answer to a load: the adapter as /v1/models lists it (its base model the parent), and where it runs."""
    return {
        "object": "model",
        "id": spec.id,
        "parent": model,
        "path": spec.path,
        "aliases": list(spec.aliases),
        "replicas": sorted(replicas),
    }
