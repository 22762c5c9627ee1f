"""API-neutral request errors; each wire API renders them in its own envelope."""

from __future__ import annotations

from typing import Literal

ErrorKind = Literal[
    "invalid_request",  # 400
    "authentication",  # 401
    "permission",  # 403
    "not_found",  # 404
    "too_large",  # 413
    "unsupported_media_type",  # 415
    "rate_limit",  # 429
    "internal",  # 500
    "overloaded",  # 503 / 529
]

STATUS: dict[ErrorKind, int] = {
    "invalid_request": 400,
    "authentication": 401,
    "permission": 403,
    "not_found": 404,
    "too_large": 413,
    "unsupported_media_type": 415,
    "rate_limit": 429,
    "internal": 500,
    "overloaded": 503,
}


class RequestError(Exception):
    """A failure the client should see as a 4xx/5xx with a clear message, never a bare 500."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,  # seconds; sent as Retry-After on 429/503/529
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after

    @property
    def status(self) -> int:
        return STATUS[self.kind]

    def __reduce__(self):  # survive the Ray hop with keyword arguments intact
        return (_rebuild, (self.kind, self.message, self.param, self.code, self.retry_after))


def _rebuild(
    kind: ErrorKind, message: str, param: str | None, code: str | None, retry_after: float | None = None
) -> RequestError:
    return RequestError(kind, message, param=param, code=code, retry_after=retry_after)


class ContextWindowExceeded(RequestError):
    """The prompt does not fit the model's window, or (max_tokens clamping off) the prompt plus the output asked
    for does not. Carries the counts so each API words it its own way (Anthropic's `prompt is too long`)."""

    def __init__(self, prompt_tokens: int, window: int, max_tokens: int | None = None) -> None:
        if max_tokens is None:
            message = (
                f"This model's maximum context length is {window} tokens. "
                f"However, your messages resulted in {prompt_tokens} tokens."
            )
        else:
            message = (
                f"This model's maximum context length is {window} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion."
            )
        param = "messages" if max_tokens is None else "max_tokens"
        super().__init__("invalid_request", message, param=param, code="context_length_exceeded")
        self.prompt_tokens = prompt_tokens
        self.window = window
        self.max_tokens = max_tokens  # None: the prompt alone is too long

    def __reduce__(self):
        return (ContextWindowExceeded, (self.prompt_tokens, self.window, self.max_tokens))
