"""ServeArgs: everything `build_app` needs, validated once at deploy time.

The same object is passed (as a plain dict from serve_config.yaml `args`) to every deployment,
so each one reads only the part it needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    """One served model: its catalog identity and how its output is parsed."""

    id: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    aliases: tuple[str, ...] = ("smollm2", "smollm2-135m-instruct")
    # Local checkpoint directory; None means the embedded default (prepared on first use).
    path: str | None = None
    context_window: int = 8192
    reasoning_parser: str | None = "qwen3"
    tool_call_parser: str | None = "hermes"
    skip_special_tokens: bool = True
    owned_by: str = "agentserve"

    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)

    def resolve_path(self) -> Path:
        if self.path is not None:
            return Path(self.path).expanduser()
        from agentserve.prepare_model import prepare_model

        return prepare_model()


class ScriptRule(_Strict):
    match: str = ""
    reply: str
    itl_ms: float = 0.0


class ScriptedCache(_Strict):
    """The scripted engine's model of a block prefix cache."""

    capacity_blocks: int = 4096
    prefill_ms_per_token: float = 0.0  # simulated cost of each uncached prompt token


class EngineSpec(_Strict):
    kind: Literal["vllm", "scripted"] = "vllm"
    block_size: int = 128  # the CPU platform's default; 16 is usual on GPUs
    # vllm
    tensor_parallel_size: int = 1
    dtype: str = "bfloat16"
    enforce_eager: bool = True
    kv_cache_gib: float | None = 1.0  # CPU KV cache size; None leaves vLLM's own sizing
    max_num_seqs: int = 64
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)  # any other AsyncEngineArgs field
    # scripted
    script: str | None = None  # path to the JSON rule list
    rules: tuple[ScriptRule, ...] = ()  # inline alternative to `script`
    cache: ScriptedCache = ScriptedCache()

    @model_validator(mode="after")
    def _scripted_needs_rules(self) -> "EngineSpec":
        if self.kind == "scripted" and self.script is None and not self.rules:
            raise ValueError("engine.kind=scripted needs `script` (a JSON rule file) or inline `rules`")
        return self


class ServeArgs(_Strict):
    model: ModelSpec = ModelSpec()
    engine: EngineSpec = EngineSpec()
    # After the first chunk, engine deltas that queue up while one is in flight are merged.
    coalesce_stream: bool = True
    enable_streaming_tool_dispatch: bool = False
    # Key for what the server seals and later verifies (thinking signatures, encrypted reasoning).
    # None: build_app generates one per deployment, shared by every replica through the args.
    secret_key: str | None = None

    @classmethod
    def from_any(cls, args: "ServeArgs | dict[str, Any] | None") -> "ServeArgs":
        if isinstance(args, ServeArgs):
            return args
        return cls.model_validate(args or {})
