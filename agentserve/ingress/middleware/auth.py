"""API-key authentication for every route but `/health`, as pure ASGI middleware.

Keys are held only as sha256 hex digests (ServeArgs.api_keys; AGENTSERVE_API_KEYS adds plain keys that
`keys_from_env` hashes when the app is built). A request presents its key as `Authorization: Bearer KEY`
(OpenAI SDKs, Codex) or `x-api-key: KEY` (Anthropic SDKs, Claude Code). Rejection happens before the body is
read, in the envelope of the API the path belongs to (401 `authentication_error`). The caller's identity
(the key's digest) is what per-key limits and the Responses store are scoped by (`current_identity`).

The admin routes (`/v1/admin/*`) take a credential of their own (ServeArgs.admin.keys; AGENTSERVE_ADMIN_KEYS adds
plain ones), never an API key: without one configured they do not exist (404), with one every other key gets 401.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import os
from typing import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from agentserve.protocol.errors import RequestError
from agentserve.ingress.errors import ErrorEnvelopes

ENV_VAR = "AGENTSERVE_API_KEYS"
ADMIN_ENV_VAR = "AGENTSERVE_ADMIN_KEYS"
ADMIN_PREFIX = "/v1/admin"
OPEN_PATHS = frozenset({"/", "/health", "/-/healthz", "/-/routes"})  # harness, load balancer and Serve probes

_IDENTITY: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentserve_identity", default=None)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def keys_from_env(environ: dict[str, str] | None = None, *, var: str = ENV_VAR) -> tuple[str, ...]:
    """Digests of the plain keys in AGENTSERVE_API_KEYS (or `var`, comma separated)."""
    raw = (environ if environ is not None else os.environ).get(var, "")
    return tuple(hash_key(k.strip()) for k in raw.split(",") if k.strip())


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The key from `x-api-key`, else from `Authorization: Bearer`."""
    bearer = None
    for name, value in headers:
        name = name.lower()
        if name == b"x-api-key" and value.strip():
            return value.decode("latin-1").strip()
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                bearer = token.strip()
    return bearer


def identity_of(key: str | None) -> str:
    """What a caller is known by: its key's digest (or the digest of nothing without a key)."""
    return hash_key(key or "")


def current_identity() -> str | None:
    """The authenticated (or, without configured keys, presented) key digest of the current request."""
    return _IDENTITY.get()


def caller_scope() -> str:
    """What per-caller state (stored responses, doctor sessions) is keyed by: the caller's key digest."""
    return _IDENTITY.get() or identity_of(None)


class KeySet:
    """The accepted key digests (empty: no authentication)."""

    def __init__(self, digests: Iterable[str] = ()) -> None:
        self._digests = tuple(sorted(set(digests)))

    def __bool__(self) -> bool:
        return bool(self._digests)

    def accepts(self, key: str | None) -> bool:
        if key is None:
            return False
        digest = hash_key(key).encode()
        ok = False
        for d in self._digests:  # compare against every digest: the time taken says nothing about which
            ok |= hmac.compare_digest(digest, d.encode())
        return ok


def is_admin_path(path: str) -> bool:
    return path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")


class AuthMiddleware:
    """401 unless a configured key is presented (an admin key on the admin routes, which are 404 without one);
    sets `current_identity()` for the rest of the request."""

    def __init__(self, app: ASGIApp, keys: KeySet, envelopes: ErrorEnvelopes, admin: KeySet | None = None) -> None:
        self.app = app
        self.keys = keys
        self.admin = admin if admin is not None else KeySet()
        self._envelopes = envelopes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        key = presented_key(scope.get("headers", []))
        path = scope.get("path", "")
        if is_admin_path(path):
            if not self.admin:  # no admin credential configured: the admin routes are not there
                await self._refuse(scope, receive, send, RequestError("not_found", "Not Found"))  # as any unknown path
                return
            if not self.admin.accepts(key):
                what = "invalid admin key" if key is not None else "missing admin key (x-api-key or Authorization: Bearer)"
                await self._refuse(scope, receive, send, RequestError("authentication", what))
                return
        elif self.keys and path not in OPEN_PATHS and not self.keys.accepts(key):
            message = "invalid API key" if key is not None else "missing API key (x-api-key or Authorization: Bearer)"
            await self._refuse(scope, receive, send, RequestError("authentication", message))
            return
        token = _IDENTITY.set(identity_of(key))
        try:
            await self.app(scope, receive, send)
        finally:
            _IDENTITY.reset(token)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, err: RequestError) -> None:
        path = scope.get("path", "")
        resp = self._envelopes.response(path, err)
        if err.kind == "authentication":
            resp.headers["www-authenticate"] = "Bearer"
        if scope["type"] == "http":
            await resp(scope, receive, send)
        elif "websocket.http.response" in scope.get("extensions", {}):  # the 401 itself, as over HTTP
            await send({"type": "websocket.http.response.start", "status": resp.status_code,
                        "headers": resp.raw_headers})  # fmt: skip
            await send({"type": "websocket.http.response.body", "body": resp.body})
        else:  # refuse the upgrade (the client sees 403)
            await send({"type": "websocket.close", "code": 1008})
