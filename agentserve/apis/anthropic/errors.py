"""Anthropic's error envelope: `{"type":"error","error":{"type","message"},"request_id"}` with its statuses."""

from __future__ import annotations

from typing import Any

from agentserve.protocol.errors import ContextWindowExceeded, RequestError

# kind -> (HTTP status, error.type); 4xx kinds Anthropic has no type for are `invalid_request_error`.
_MAP: dict[str, tuple[int, str]] = {
    "invalid_request": (400, "invalid_request_error"),
    "authentication": (401, "authentication_error"),
    "permission": (403, "permission_error"),
    "not_found": (404, "not_found_error"),
    "too_large": (413, "request_too_large"),
    "rate_limit": (429, "rate_limit_error"),
    "internal": (500, "api_error"),
    "overloaded": (529, "overloaded_error"),
}


def status_and_type(err: RequestError) -> tuple[int, str]:
    if err.kind in _MAP:
        return _MAP[err.kind]
    status = err.status
    return status, "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_type(err: RequestError) -> str:
    return status_and_type(err)[1]


def status(err: RequestError) -> int:
    return status_and_type(err)[0]


def error_object(err: RequestError) -> dict[str, Any]:
    return {"type": error_type(err), "message": err.message}


def error_body(err: RequestError, request_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "error", "error": error_object(err)}
    if request_id:
        body["request_id"] = request_id
    return body


def prompt_too_long(prompt_tokens: int, maximum: int) -> RequestError:
    """Claude Code's compaction recovery keys on this exact wording."""
    return RequestError(
        "invalid_request",
        f"prompt is too long: {prompt_tokens} tokens > {maximum} maximum",
        code="context_length_exceeded",
    )


def context_exceeded(err: ContextWindowExceeded) -> RequestError:
    """Anthropic's wording for each case; Claude Code parses both (the second to retry with a smaller max_tokens)."""
    if err.max_tokens is None:
        return prompt_too_long(err.prompt_tokens, err.window)
    return RequestError(
        "invalid_request",
        f"input length and `max_tokens` exceed context limit: {err.prompt_tokens} + {err.max_tokens} > "
        f"{err.window}, decrease input length or `max_tokens` and try again",
        code="context_length_exceeded",
    )
