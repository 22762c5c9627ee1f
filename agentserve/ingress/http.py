"""Small HTTP helpers every API handler uses: body parsing (decompressed, then into a pydantic model), SSE headers.

Request ids are the server's own (ingress/middleware/request_id.py); a client's x-request-id is never one."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

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


# Bodies up to this size (as sent, uncompressed) are decoded on the event loop: the hop to a worker thread and back
# costs ~50 us, as much as parsing and validating ~4 KiB of agent JSON, and a body this small stalls the loop for
# well under a millisecond. Anything larger (a 300-turn Claude Code body, 0.8 MiB, takes ~50 ms), and every
# compressed body (its decoded size is unknown until it is decompressed), is decoded in a worker thread, so a legal
# body near the caps never stalls the other requests of the replica.
INLINE_BODY_BYTES = 16 * 1024


async def parse_body(
    request: Request, model: type[M], spec: LimitsSpec, validate: Callable[[Any], M] | None = None
) -> M:
    """The body, read under `spec`'s size limits, decompressed, then validated into `model` (by `validate(data)`
    where given: a validation that reuses an earlier request's, its errors answered as pydantic's are)."""
    encoding = request.headers.get("content-encoding")
    identity = not encoding or encoding.strip().lower() == "identity"
    # an uncompressed body is already the decoded document: it is held to that cap as it arrives
    cap = min(spec.max_body_bytes, spec.max_decompressed_bytes) if identity else spec.max_body_bytes
    raw = await limits.read_body(request, cap)
    if identity and len(raw) <= INLINE_BODY_BYTES:
        return decode_json(raw, encoding, model, spec, validate)
    return await asyncio.to_thread(decode_json, raw, encoding, model, spec, validate)


async def parse_frame(text: str, model: type[M], spec: LimitsSpec) -> M:
    """A WebSocket frame (a request body) into `model`, off the event loop when it is large."""
    if len(text) <= INLINE_BODY_BYTES:
        return parse_json(text, model, spec)
    return await asyncio.to_thread(parse_json, text, model, spec)


def decode_json(
    raw: bytes,
    content_encoding: str | None,
    model: type[M],
    spec: LimitsSpec,
    validate: Callable[[Any], M] | None = None,
) -> M:
    """A raw request body decompressed (bounded by `max_decompressed_bytes`), then `parse_json`: all of the CPU
    work a body costs before a handler sees it, in one call a worker thread can run."""
    return parse_json(decode_body(raw, content_encoding, spec.max_decompressed_bytes), model, spec, validate)


def parse_json(raw: bytes | str, model: type[M], spec: LimitsSpec, validate: Callable[[Any], M] | None = None) -> M:
    """A JSON document (a decoded request body, or a WebSocket frame) into `model`, under the same body limits."""
    if len(raw) > spec.max_decompressed_bytes:
        raise RequestError("too_large", f"request body exceeds {spec.max_decompressed_bytes} bytes")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError("invalid_request", f"request body is not valid JSON: {exc}") from exc
    limits.check_body(data, spec, len(raw))
    try:
        return model.model_validate(data) if validate is None else validate(data)
    except ValidationError as exc:
        raise RequestError("invalid_request", describe_validation(exc.errors())) from exc
