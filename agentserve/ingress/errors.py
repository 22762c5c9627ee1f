"""Which error envelope a failed request gets: the one of the API whose path it called.

The table is data the app is built with (ingress/app.py: `ROUTE_ENVELOPES`), handed to each middleware and
exception handler that answers errors, never a registry filled as modules import."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from fastapi.responses import JSONResponse

from agentserve.apis import openai_errors
from agentserve.protocol.errors import RequestError


def _own_status(err: RequestError) -> int:
    return err.status


@dataclass(frozen=True)
class Envelope:
    """One API's error body, and its status where it differs from the error's own (Anthropic: 529)."""

    body: Callable[[RequestError], dict[str, Any]]
    status: Callable[[RequestError], int] = _own_status


OPENAI_ENVELOPE = Envelope(openai_errors.error_body)


@dataclass(frozen=True)
class ErrorEnvelopes:
    """Path prefix -> envelope; the longest prefix wins, everything else speaks OpenAI's envelope."""

    by_prefix: Mapping[str, Envelope] = field(default_factory=dict)

    def for_path(self, path: str) -> Envelope:
        prefixes = sorted((p for p in self.by_prefix if path.startswith(p)), key=len, reverse=True)
        return self.by_prefix[prefixes[0]] if prefixes else OPENAI_ENVELOPE

    def parts(self, path: str, err: RequestError) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        """Status, body and headers of `err` as the API whose path it came through answers it."""
        envelope = self.for_path(path)
        status = envelope.status(err)
        headers = {"x-should-retry": "true"} if status in (429, 503, 529) else None
        if headers is not None and getattr(err, "retry_after", None) is not None:
            headers["retry-after"] = str(max(1, math.ceil(err.retry_after)))
        return status, envelope.body(err), headers

    def response(self, path: str, err: RequestError) -> JSONResponse:
        status, body, headers = self.parts(path, err)
        return JSONResponse(body, status_code=status, headers=headers)
