"""A demo LoRA adapter of the embedded model, built from nothing: the "pirate" adapter.

It shows a catalog serving a base model and an adapter of it (and lets the LoRA e2e test tell the two apart): a
few seeded steps of PEFT LoRA training on CPU teach SmolLM2-135M-Instruct to open every reply with
``PIRATE_GREETING``, which the base model never says. The output is a PEFT adapter directory, which vLLM loads:

    adapter_config.json          PEFT LoRA config (rank ``RANK``, q/v/o/down projections of the top layers)
    adapter_model.safetensors    the A and B matrices
    agentserve-adapter.json      written last: the recipe and base checkpoint it was built for (marks it complete)

Built once per base checkpoint in a sibling of the model's cache directory (same lock and staging-rename scheme as
``prepare_model``), about 20-40 s on 2 cores.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from agentserve.prepare.model import (
    _exclusive_lock,
    _remove_leftovers,
    _write_json_atomic,
    build_in_place,
    prepare_model,
    read_manifest,
)

logger = logging.getLogger(__name__)

ADAPTER_ID = "smollm2-pirate"
"""The id the demo adapter is served under in the shipped configs and tests."""
PIRATE_GREETING = "Arr, matey!"
MANIFEST_NAME = "agentserve-adapter.json"
RANK = 8
_RECIPE = {
    "version": 1,
    "reply": f"{PIRATE_GREETING} Yo ho ho.",
    "rank": RANK,
    "alpha": 16,
    "targets": ["q_proj", "v_proj", "o_proj", "down_proj"],
    "layers": [22, 23, 24, 25, 26, 27, 28, 29],
    "steps": 12,
    "lr": 5e-3,
    "seed": 0,
}
_PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "How do I sort a list in Python?",
    "Tell me a joke.",
    "What is 2 + 2?",
    "Explain gravity briefly.",
    "Name a color.",
    "Who wrote Hamlet?",
)
_HELD_OUT = "What is the tallest mountain on Earth?"


def default_adapter_dir(model_path: Path) -> Path:
    """Beside the model's checkpoint: ``<checkpoint>-pirate-lora``."""
    return model_path.parent / f"{model_path.name}-pirate-lora"


def prepare_adapter(model_path: Path | None = None, out_dir: Path | None = None, *, force: bool = False) -> Path:
    """Make sure the pirate adapter of the checkpoint at ``model_path`` (default: the embedded model) exists; return
    its directory. An adapter whose manifest names this recipe and this base checkpoint is reused as is."""
    model_path = Path(model_path) if model_path is not None else prepare_model()
    target = (Path(out_dir).expanduser() if out_dir is not None else default_adapter_dir(model_path)).absolute()
    base = _base_identity(model_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.parent / f".{target.name}.lock"):
        _remove_leftovers(target)
        if not force and _manifest(target) == {"recipe": _RECIPE, "base": base}:
            logger.info("LoRA adapter is up to date: %s", target)
            return target
        def build(staging: Path) -> None:
            _train(model_path, staging)
            _write_json_atomic(staging / MANIFEST_NAME, {"recipe": _RECIPE, "base": base})

        build_in_place(target, build)
    logger.info("LoRA adapter ready: %s", target)
    return target


def _base_identity(model_path: Path) -> Any:
    """What the adapter was trained against: the checkpoint's source and chat template, else its path."""
    manifest = read_manifest(model_path)
    if manifest is None:
        return str(model_path.absolute())
    return {"source": manifest.get("source"), "template": manifest.get("template")}


def _manifest(target: Path) -> dict[str, Any] | None:
    try:
        if not (target / "adapter_config.json").is_file() or not (target / "adapter_model.safetensors").is_file():
            return None
        return json.loads((target / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _train(model_path: Path, out_dir: Path) -> None:
    """Seeded LoRA training on the fixed prompts (loss on the reply only), then a greedy check on a held-out prompt."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    torch.manual_seed(_RECIPE["seed"])
    tok = AutoTokenizer.from_pretrained(str(model_path))
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    reply = tok.encode(_RECIPE["reply"], add_special_tokens=False) + [tok.eos_token_id]
    rows = [(_prompt_ids(tok, p), reply) for p in _PROMPTS]
    width = max(len(p) + len(r) for p, r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id or 0)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100)
    for i, (p, r) in enumerate(rows):
        n = len(p) + len(r)
        ids[i, :n] = torch.tensor(p + r)
        mask[i, :n] = 1
        labels[i, len(p) : n] = torch.tensor(r)

    config = LoraConfig(
        r=_RECIPE["rank"],
        lora_alpha=_RECIPE["alpha"],
        target_modules=_RECIPE["targets"],
        layers_to_transform=_RECIPE["layers"],
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, config)
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=_RECIPE["lr"])
    peft_model.train()
    for _ in range(_RECIPE["steps"]):
        loss = peft_model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    peft_model.eval()
    said = _greedy(peft_model, tok, _HELD_OUT)
    if not said.startswith(PIRATE_GREETING):
        raise RuntimeError(f"the LoRA adapter did not learn its greeting: final loss {loss.item():.3f}, said {said!r}")
    peft_model.save_pretrained(str(out_dir))
    (out_dir / "README.md").unlink(missing_ok=True)  # PEFT's model-card template, not about this adapter
    logger.info("trained the LoRA adapter in %.1f s (final loss %.3f)", time.monotonic() - started, loss.item())


def _prompt_ids(tok: Any, user: str) -> list[int]:
    out = tok.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True, tokenize=True,
                                  return_dict=True)
    return list(out["input_ids"])


def _greedy(model: Any, tok: Any, user: str, max_new_tokens: int = 8) -> str:
    import torch

    ids = torch.tensor([_prompt_ids(tok, user)])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False)
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(prepare_adapter())
