"""The engine boundary: what an engine replica must provide to the graph."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Protocol

from agentserve.config import ModelSpec, ServeArgs
from agentserve.protocol import EngineDelta, PreprocessedRequest


@dataclass(frozen=True, slots=True)
class EngineStats:
    active: int  # requests admitted and not yet finished
    started: int  # requests ever started
    aborted: int  # requests ended early by the caller (client disconnect, stop string)
    cached_blocks: int = 0


class Engine(Protocol):
    async def start(self) -> None: ...

    def generate(self, request: PreprocessedRequest) -> AsyncIterator[EngineDelta]:
        """Stream deltas; closing the iterator early aborts the request in the engine."""
        ...

    def stats(self) -> EngineStats: ...

    async def shutdown(self) -> None: ...


def make_engine(args: ServeArgs, model: ModelSpec, model_path: Path) -> Engine:
    """The engine of one catalog model (`model.engine`, filled in by ServeArgs.catalog(); else args.engine)."""
    spec = model.engine or args.engine
    markers = reasoning_markers(model)
    if spec.kind == "scripted":
        from agentserve.engines.scripted import ScriptedEngine

        return ScriptedEngine.from_spec(spec, model_path, reasoning_markers=markers)
    from agentserve.engines.vllm import VllmEngine

    return VllmEngine(spec, model_path, context_window=model.context_window, reasoning_markers=markers)


def reasoning_markers(model: ModelSpec | ServeArgs) -> tuple[str, str] | None:
    """(start, end) of the model's reasoning block, which a thinking budget counts and ends; None: no reasoning.
    Given ServeArgs: its default model's."""
    if isinstance(model, ServeArgs):
        model = model.catalog()[0]
    if model.reasoning_parser is None:
        return None
    from agentserve.preprocess.replay import policy_for

    policy = policy_for(model.reasoning_parser, model.replay_family)
    return policy.think_open.strip(), policy.think_close.strip()
