"""A `request-id` header on every response, and the id for error bodies that quote it.

Pure ASGI (no BaseHTTPMiddleware), so streaming responses pass through untouched. The id is always a fresh
`req_…` (Anthropic's form; `x-request-id` cannot be used: Ray Serve's proxy sets it on every request);
handlers read it with `current_request_id()`.
"""

from __future__ import annotations

import contextvars
import secrets
import string

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_B62 = string.ascii_letters + string.digits
_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentserve_request_id", default=None)


def new_request_id() -> str:
    return "req_01" + "".join(secrets.choice(_B62) for _ in range(22))


def current_request_id() -> str | None:
    return _CURRENT.get()


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = new_request_id()
        token = _CURRENT.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"request-id"]
                headers.append((b"request-id", rid.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _CURRENT.reset(token)
