"""OpenAI's error envelope, shared by Chat Completions and the models/tokenize endpoints."""

from __future__ import annotations

from typing import Any

from agentserve.protocol.errors import RequestError

_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "too_large": "invalid_request_error",
    "unsupported_media_type": "invalid_request_error",
    "rate_limit": "rate_limit_error",
    "internal": "server_error",
    "overloaded": "server_error",
}


def error_body(err: RequestError) -> dict[str, Any]:
    return {
        "error": {
            "message": err.message,
            "type": _TYPES[err.kind],
            "param": err.param,
            "code": err.code,
        }
    }
