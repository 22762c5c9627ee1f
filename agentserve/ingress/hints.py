"""Agent hints from a request: `nvext.agent_hints` / `nvext.session_control` in the body, `x-agentserve-*` headers.

One helper for every wire API. The body wins over headers (it is per request; headers are usually
set once in a harness's configuration), and both win over what the API decoder derived (e.g. `user`). The
session headers (agentserve's and the harnesses') are ingress/lineage.py's: the decoder gets the session from it.

    gen = with_hints(gen, request.headers, body)
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel

from agentserve.protocol import AgentHints, GenerationRequest
from agentserve.protocol.errors import RequestError
from agentserve.ingress.middleware.auth import current_identity

HEADER = "x-agentserve-"
_FIELDS = {  # hint -> parser
    "priority": int,
    "osl": int,
    "latency_sensitivity": float,
    "speculative_prefill": lambda v: v if isinstance(v, bool) else str(v).strip().lower() in ("1", "true", "yes", "on"),
}


def _nvext(body: Any) -> dict[str, Any]:
    if body is None:
        return {}
    if isinstance(body, BaseModel):
        raw = getattr(body, "nvext", None)
        if raw is None and body.model_extra:
            raw = body.model_extra.get("nvext")
    else:
        raw = body.get("nvext") if isinstance(body, dict) else None
    if isinstance(raw, BaseModel):
        raw = raw.model_dump(exclude_none=True)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RequestError("invalid_request", "nvext must be an object", param="nvext")
    return raw


def _parse(name: str, value: Any, where: str) -> Any:
    try:
        out = _FIELDS[name](value)
    except (TypeError, ValueError):
        raise RequestError("invalid_request", f"{where}: not a valid {name}: {value!r}", param=where) from None
    if name == "osl" and out < 0:
        raise RequestError("invalid_request", f"{where}: osl must be >= 0", param=where)
    return out


def extract_hints(headers: Mapping[str, str], body: Any, base: AgentHints | None = None) -> AgentHints:
    found: dict[str, Any] = {}
    for name in _FIELDS:
        raw = headers.get(HEADER + name.replace("_", "-"))
        if raw is not None and raw != "":
            found[name] = _parse(name, raw, HEADER + name.replace("_", "-"))
    nvext = _nvext(body)
    hints = nvext.get("agent_hints") or {}
    if not isinstance(hints, dict):
        raise RequestError("invalid_request", "nvext.agent_hints must be an object", param="nvext.agent_hints")
    for name, value in hints.items():
        if name in _FIELDS and value is not None:
            found[name] = _parse(name, value, f"nvext.agent_hints.{name}")
    session = (nvext.get("session_control") or {}).get("session_id")
    if session:
        found["session_id"] = str(session)
    base = base or AgentHints()
    return base.model_copy(update=found) if found else base


def with_hints(gen: GenerationRequest, headers: Mapping[str, str], body: Any) -> GenerationRequest:
    """The decoded request with hints from the body's `nvext` and the `x-agentserve-*` headers applied."""
    hints = extract_hints(headers, body, gen.hints)
    return gen if hints is gen.hints else gen.model_copy(update={"hints": hints})


def authorize_hints(gen: GenerationRequest, priority_keys: tuple[str, ...]) -> GenerationRequest:
    """Clamp `priority` / `latency_sensitivity` to the default unless the caller's key may raise them
    (`router.priority_keys`: key digests, or "*" for everyone). Other hints are the caller's own business."""
    h = gen.hints
    if h.priority == 0 and h.latency_sensitivity is None:
        return gen
    if "*" in priority_keys or current_identity() in priority_keys:
        return gen
    return gen.model_copy(update={"hints": h.model_copy(update={"priority": 0, "latency_sensitivity": None})})
