"""Which error envelope a failed request gets: the one of the API whose path it called."""

from __future__ import annotations

from typing import Any, Callable

from fastapi.responses import JSONResponse

from agentserve.apis import openai_errors
from agentserve.protocol.errors import RequestError

Envelope = Callable[[RequestError], dict[str, Any]]

# Longest prefix wins; everything else (chat, responses, models, tokenize) speaks OpenAI's envelope.
_ENVELOPES: dict[str, Envelope] = {}


def register_envelope(path_prefix: str, envelope: Envelope) -> None:
    _ENVELOPES[path_prefix] = envelope


def error_response(path: str, err: RequestError) -> JSONResponse:
    prefixes = sorted((p for p in _ENVELOPES if path.startswith(p)), key=len, reverse=True)
    envelope = _ENVELOPES[prefixes[0]] if prefixes else openai_errors.error_body
    headers = {"x-should-retry": "true"} if err.status in (429, 503, 529) else None
    return JSONResponse(envelope(err), status_code=err.status, headers=headers)
