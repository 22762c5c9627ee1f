"""One vLLM graph for the e2e modules on the real engine (test_lora, test_vllm_graph, test_vllm_request_fields):
deployed once, at the first of them (they run one after another: marker graph("vllm")).

Its model and engine sections are the ones `make serve` runs (serve_config.yaml: the 32K YaRN window, block 128),
with the demo LoRA adapter (agentserve prepare-adapter, prepared by `make model`) declared twice, as PIRATE and as
TWIN (the same weights under another id). Declared adapters turn LoRA on in the engine; a request for the base
model carries no adapter and is served by the base weights alone, as in an engine without LoRA.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PIRATE = "smollm2-pirate"
TWIN = "smollm2-pirate-twin"  # the same weights under another id: its cache is its own all the same


def _shipped_args() -> dict:
    """The model and engine sections `make serve` runs (serve_config.yaml: the 32K YaRN window, block 128)."""
    args = yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"][0]["args"]
    return {"model": args["model"], "engine": {**args["engine"], "max_num_seqs": 8}}


VLLM_ARGS = _shipped_args()
BLOCK = VLLM_ARGS["engine"]["block_size"]


def vllm_args(adapter_path: Path) -> dict[str, Any]:
    """VLLM_ARGS with the demo adapter declared as PIRATE and TWIN (rank 8: the adapter's own)."""
    adapters = [{"id": PIRATE, "path": str(adapter_path)}, {"id": TWIN, "path": str(adapter_path)}]
    return {**VLLM_ARGS, "model": {**VLLM_ARGS["model"], "adapters": adapters, "max_lora_rank": 8}}
