"""Both shipped Serve configs are valid for Ray Serve and for agentserve; GPU paths are checked by configuration."""

from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from agentserve.config import ServeArgs
from agentserve.engines.vllm import engine_args

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["serve_config.yaml", "serve_config.gpu.yaml"])
def test_serve_configs_validate(name):
    raw = yaml.safe_load((ROOT / name).read_text())
    schema = ServeDeploySchema.model_validate(raw)
    for app in schema.applications:
        assert app.import_path == "agentserve.serve.app:build_app"
        ServeArgs.from_any(app.args)
        names = {d["name"] for d in raw["applications"][0]["deployments"]}
        assert names == {"Ingress", "Preprocessor", "Router", "Engine"}


def test_gpu_variant_is_tp4_in_one_strict_pack_group():
    raw = yaml.safe_load((ROOT / "serve_config.gpu.yaml").read_text())
    app = raw["applications"][0]
    args = ServeArgs.from_any(app["args"])
    engine = next(d for d in app["deployments"] if d["name"] == "Engine")
    assert engine["placement_group_strategy"] == "STRICT_PACK"
    assert sum(b.get("GPU", 0) for b in engine["placement_group_bundles"]) == args.engine.tensor_parallel_size == 4
    kwargs = engine_args(args.engine, Path("/models/x"), args.model.context_window)
    assert kwargs["tensor_parallel_size"] == 4
    assert kwargs["distributed_executor_backend"] == "ray"
    assert kwargs["enable_prefix_caching"] is True


def test_cpu_default_is_vllm_with_prefix_caching():
    raw = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    args = ServeArgs.from_any(raw["applications"][0]["args"])
    assert args.engine.kind == "vllm" and args.model.path is None
    kwargs = engine_args(args.engine, Path("/m"), args.model.context_window)
    assert kwargs["enforce_eager"] is True and "distributed_executor_backend" not in kwargs
    assert kwargs["kv_cache_memory_bytes"] == 3 << 30


def test_cpu_default_serves_a_32k_window_that_claude_code_fits(model_path):
    """Claude Code's system prompt and tools are ~20K tokens: the shipped window must be >= 32K, reached by YaRN
    scaling of the 8K-trained checkpoint that vLLM accepts, with KV room for more than one full-window session."""
    import json

    raw = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    args = ServeArgs.from_any(raw["applications"][0]["args"])
    window = args.model.context_window
    kwargs = engine_args(args.engine, model_path, window)
    trained = json.loads((model_path / "config.json").read_text())
    rope = kwargs["hf_overrides"]["rope_parameters"]
    assert window >= 32768 and kwargs["max_model_len"] == window
    assert rope["rope_type"] == "yarn" and rope["original_max_position_embeddings"] == trained["max_position_embeddings"]
    assert rope["factor"] * rope["original_max_position_embeddings"] == window
    assert rope["rope_theta"] == trained["rope_parameters"]["rope_theta"]  # only the scaling changes
    assert kwargs["hf_overrides"]["max_position_embeddings"] == window  # vLLM: YaRN's max length is pre-scaled
    per_token = 2 * trained["num_hidden_layers"] * trained["num_key_value_heads"] * trained["head_dim"] * 2
    assert kwargs["kv_cache_memory_bytes"] // (per_token * window) >= 2


def test_scripted_engine_needs_rules():
    with pytest.raises(ValueError):
        ServeArgs.from_any({"engine": {"kind": "scripted"}})
