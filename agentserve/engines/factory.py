"""The engine a replica runs, from its catalog model: vLLM's AsyncLLM, or the scripted test double."""

from __future__ import annotations

from pathlib import Path

from agentserve.config import EngineSpec, ModelSpec
from agentserve.engines.base import Engine, reasoning_markers


def make_engine(spec: EngineSpec, model: ModelSpec, model_path: Path) -> Engine:
    """The engine of one catalog model (`spec`: its engine, as the resolved catalog gives it)."""
    markers = reasoning_markers(model)
    if spec.kind == "scripted":
        from agentserve.engines.scripted import ScriptedEngine

        return ScriptedEngine.from_spec(spec, model_path, reasoning_markers=markers, adapters=model.adapters)
    from agentserve.engines.vllm import VllmEngine

    return VllmEngine(
        spec, model_path, context_window=model.context_window, reasoning_markers=markers,
        adapters=model.adapters, max_lora_rank=model.max_lora_rank, reads_images="image" in model.input_modalities,
    )
