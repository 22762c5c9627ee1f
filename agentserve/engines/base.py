"""The engine boundary: what an engine replica must provide to the graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Protocol

from agentserve.config import LoraAdapterSpec, ModelSpec
from agentserve.protocol import EngineDelta, EngineRequest


@dataclass(frozen=True, slots=True)
class EngineStats:
    active: int  # requests admitted and not yet finished
    started: int  # requests ever started
    aborted: int  # requests ended early by the caller (client disconnect, stop string)
    cached_blocks: int = 0


class Engine(Protocol):
    async def start(self) -> None: ...

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineDelta]:
        """Stream deltas; closing the iterator early aborts the request in the engine."""
        ...

    def stats(self) -> EngineStats: ...

    def kv_capacity_tokens(self) -> int | None:
        """Tokens the engine's KV cache holds (None: not known)."""
        ...

    async def load_adapter(self, adapter: LoraAdapterSpec) -> bool:
        """Serve a LoRA adapter under its id from now on; False if it was already loaded (same path).
        ValueError with the reason if it cannot be loaded."""
        ...

    def adapters(self) -> tuple[LoraAdapterSpec, ...]:
        """The LoRA adapters this engine serves (declared ones first, in catalog order)."""
        ...

    async def shutdown(self) -> None: ...


def already_loaded(known: LoraAdapterSpec, adapter: LoraAdapterSpec) -> bool:
    """Loading an adapter id again is a no-op (False) from the same path, an error from another: requests and
    cached prefixes under that id would otherwise silently change weights."""
    if known.path != adapter.path:
        raise ValueError(f"LoRA adapter {adapter.id!r} is already loaded from {known.path}; load {adapter.path} "
                         "under a new id")
    return False


def unknown_adapter(request: EngineRequest, loaded: tuple[str, ...]) -> EngineDelta:
    """The reply to a request naming an adapter this engine does not hold: an error, never a hang."""
    return EngineDelta(
        token_ids=[], finish_reason="error", prompt_tokens=request.prompt_tokens, num_cached_tokens=0,
        error=f"LoRA adapter {request.adapter!r} is not loaded on this engine (loaded: {', '.join(loaded) or 'none'})",
    )


def reasoning_markers(model: ModelSpec) -> tuple[str, str] | None:
    """(start, end) of the model's reasoning block, which a thinking budget counts and ends; None: no reasoning."""
    if model.reasoning_parser is None:
        return None
    from agentserve.preprocess.replay import policy_for

    policy = policy_for(model.reasoning_parser, model.replay_family)
    return policy.think_open.strip(), policy.think_close.strip()
