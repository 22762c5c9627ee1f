"""An engine is built for one catalog model with its LoRA adapters (no engine started: vLLM's arguments, and the
scripted engine's adapters)."""

from __future__ import annotations

from pathlib import Path

from agentserve.config import ServeArgs
from agentserve.engines import make_engine
from agentserve.engines.vllm import engine_args

PIRATE = {"id": "pirate", "path": "/adapters/pirate"}
POET = {"id": "poet", "path": "/adapters/poet"}


def _catalog(engine: dict, adapters: list[dict], **model) -> ServeArgs:
    return ServeArgs.from_any({"models": [
        {"id": "base", "aliases": [], "engine": engine, "adapters": adapters, **model},
        {"id": "other", "aliases": [], "engine": engine},
    ]})


def test_declared_adapters_turn_lora_on_with_a_slot_each():
    args = _catalog({"kind": "vllm"}, [PIRATE, POET], max_lora_rank=8)
    with_lora, without = args.resolve_catalog().models
    kwargs = engine_args(with_lora.engine, Path("/m"), 4096, adapters=with_lora.adapters,
                         max_lora_rank=with_lora.max_lora_rank)
    assert (kwargs["enable_lora"], kwargs["max_lora_rank"], kwargs["max_loras"]) == (True, 8, 2)
    assert "enable_lora" not in engine_args(without.engine, Path("/m"), 4096, adapters=without.adapters)


def test_engine_kwargs_can_enable_lora_for_adapters_loaded_at_run_time():
    args = _catalog({"kind": "vllm", "engine_kwargs": {"enable_lora": True, "max_loras": 4}}, [])
    kwargs = engine_args(args.resolve_catalog().models[0].engine, Path("/m"), 4096)
    assert kwargs["enable_lora"] is True and kwargs["max_loras"] == 4


def test_make_engine_gives_each_model_its_own_adapters(model_path):
    args = _catalog({"kind": "scripted", "rules": [{"reply": "hi"}]}, [PIRATE, POET])
    base, other = args.resolve_catalog().models
    assert [a.id for a in make_engine(base.engine, base, model_path).adapters()] == ["pirate", "poet"]
    assert make_engine(other.engine, other, model_path).adapters() == ()


def test_engine_args_are_logged_without_secrets():
    """`engine_kwargs` may carry an `hf_token` (or any key): the start-up log line shows the rest, not those."""
    from agentserve.engines.vllm import redacted

    shown = redacted({"hf_token": "hf_abc123", "model": "/m", "max_num_batched_tokens": 8192, "api_key": "sk-1"})
    assert shown == {"hf_token": "<redacted>", "model": "/m", "max_num_batched_tokens": 8192, "api_key": "<redacted>"}
