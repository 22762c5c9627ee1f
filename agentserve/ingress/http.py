"""Small HTTP helpers every API handler uses: body parsing (decompressed, then into a pydantic model), SSE headers.

Request ids are the server's own (ingress/middleware/request_id.py); a client's x-request-id is never one."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError

from agentserve.config import LimitsSpec
from agentserve.protocol.errors import RequestError
from agentserve.ingress.middleware.compression import decode_body
from agentserve.ingress.middleware import limits

M = TypeVar("M", bound=BaseModel)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def describe_validation(errors: list[Any]) -> str:
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
        parts.append(f"{loc or 'body'}: {e.get('msg')}")
    return "invalid request: " + "; ".join(parts)


async def parse_body(request: Request, model: type[M], spec: LimitsSpec) -> M:
    """The body, read under `spec`'s size limits, decompressed, then validated into `model`."""
    raw = await limits.read_body(request, spec.max_body_bytes)
    raw = decode_body(raw, request.headers.get("content-encoding"), spec.max_decompressed_bytes)
    return parse_json(raw, model, spec)


def parse_json(raw: bytes | str, model: type[M], spec: LimitsSpec) -> M:
    """A JSON document (a decoded request body, or a WebSocket frame) into `model`, under the same body limits."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError("invalid_request", f"request body is not valid JSON: {exc}") from exc
    limits.check_body(data, spec)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestError("invalid_request", describe_validation(exc.errors())) from exc
