"""Which error envelope a failed request gets: the one of the API whose path it called."""

from __future__ import annotations

import math
from typing import Any, Callable

from fastapi.responses import JSONResponse

from agentserve.apis import openai_errors
from agentserve.protocol.errors import RequestError

Envelope = Callable[[RequestError], dict[str, Any]]

# Longest prefix wins; everything else (chat, responses, models, tokenize) speaks OpenAI's envelope.
_ENVELOPES: dict[str, Envelope] = {}
_STATUSES: dict[str, Callable[[RequestError], int]] = {}  # APIs whose statuses differ (Anthropic: 529)


def register_envelope(
    path_prefix: str, envelope: Envelope, status: Callable[[RequestError], int] | None = None
) -> None:
    _ENVELOPES[path_prefix] = envelope
    if status is not None:
        _STATUSES[path_prefix] = status


def error_parts(path: str, err: RequestError) -> tuple[int, dict[str, Any], dict[str, str] | None]:
    """Status, body and headers of `err` as the API whose path it came through answers it."""
    prefixes = sorted((p for p in _ENVELOPES if path.startswith(p)), key=len, reverse=True)
    envelope = _ENVELOPES[prefixes[0]] if prefixes else openai_errors.error_body
    status = _STATUSES[prefixes[0]](err) if prefixes and prefixes[0] in _STATUSES else err.status
    headers = {"x-should-retry": "true"} if status in (429, 503, 529) else None
    if headers is not None and getattr(err, "retry_after", None) is not None:
        headers["retry-after"] = str(max(1, math.ceil(err.retry_after)))
    return status, envelope(err), headers


def error_response(path: str, err: RequestError) -> JSONResponse:
    status, body, headers = error_parts(path, err)
    return JSONResponse(body, status_code=status, headers=headers)
