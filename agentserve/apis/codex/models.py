"""The model catalog in Codex's shape: `{"models": [ModelInfo, …]}` for `GET /v1/models?client_version=…`
and for the `model_catalog_json` file `agentserve codex-config` writes.

Codex shapes its whole behaviour from the ModelInfo it resolves for the model id (tools, reasoning
parameters, parallel calls, tool-output truncation); an id with no entry falls back to conservative
defaults. Codex matches the longest catalog slug that prefixes the requested id, so every served name
(id and aliases) gets its own entry. Fields are the superset Codex reads; it ignores unknown ones.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from agentserve.config import ModelSpec

_LEVEL_TEXT = {
    "none": "No reasoning",
    "minimal": "Fastest, least reasoning",
    "low": "Fast responses with lighter reasoning",
    "medium": "Balances speed and reasoning depth",
    "high": "Maximizes reasoning depth for complex problems",
    "xhigh": "Extra high reasoning depth",
}


def model_info(slug: str, model: ModelSpec, *, listed: bool = True) -> dict[str, Any]:
    p = model.profile
    return {
        "slug": slug,
        "display_name": p.display_name or slug,
        "description": p.description,
        "default_reasoning_level": p.default_reasoning_level,
        "supported_reasoning_levels": [
            {"effort": level, "description": _LEVEL_TEXT[level]} for level in p.supported_reasoning_levels
        ],
        "shell_type": p.shell_type,
        "visibility": "list" if listed else "hide",
        "supported_in_api": True,
        "priority": p.priority,
        "upgrade": None,
        "base_instructions": p.base_instructions,
        "supports_reasoning_summaries": p.supports_reasoning_summaries,
        "default_reasoning_summary": "auto" if p.supports_reasoning_summaries else "none",
        "support_verbosity": p.support_verbosity,
        "default_verbosity": None,
        "apply_patch_tool_type": model.apply_patch_tool_type(),
        "truncation_policy": {"mode": p.truncation_policy.mode, "limit": p.truncation_policy.limit},
        "supports_parallel_tool_calls": p.supports_parallel_tool_calls,
        "context_window": model.context_window,
        "max_context_window": model.context_window,
        "auto_compact_token_limit": None,
        "effective_context_window_percent": 95,
        "experimental_supported_tools": [],
        "input_modalities": list(model.input_modalities),
        "max_output_tokens": p.max_output_tokens,
        # The Responses WebSocket is served: builds that gate it on the model (not only on the provider's
        # `supports_websockets`, as 0.171 does) read this.
        "prefer_websockets": True,
    }


def models_body(models: list[ModelSpec]) -> dict[str, Any]:
    """One entry per served name of every catalog model: ids (a model's and each of its LoRA adapters', which
    share their base's profile and window) listed in pickers, aliases hidden but resolvable."""
    listed = {m.id for m in models} | {a.id for m in models for a in m.adapters}
    return {"models": [model_info(name, m, listed=name in listed) for m in models for name in m.served_names()]}


def etag(body: dict[str, Any]) -> str:
    return '"' + hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32] + '"'
