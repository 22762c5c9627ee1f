"""Request limits: what one body may contain, and how much one API key may use at once and per minute.

Body limits are checked on the parsed JSON before any model sees it, so a hostile body (a million messages,
a 100 MB string, a tool schema nested 10,000 deep) costs one linear walk and a 400/413, never a render or
a tokenizer run. Per-key limits answer 429 with `retry-after` at once: agents retry, so queueing here would
only hide the overload (the router's bounded admission queue is the one place requests wait).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from agentserve.config import LimitsSpec
from agentserve.protocol.errors import RequestError
from agentserve.serve.errors import error_response

# Paths whose POSTs run the model (or the preprocessor); per-key limits apply to these.
GENERATION_PATHS = ("/v1/messages", "/v1/chat/completions", "/v1/responses")
_MAX_IDENTITIES = 100_000  # bound on remembered callers (without keys, anyone can invent identities)


class Limits:
    """The configured LimitsSpec, set by the ingress at start (the middleware exists before the config)."""

    def __init__(self, spec: LimitsSpec | None = None) -> None:
        self.spec = spec or LimitsSpec()

    def replace(self, spec: LimitsSpec) -> None:
        self.spec = spec


LIMITS = Limits()


def configure(spec: LimitsSpec) -> None:
    """Set this process's limits (a function, not an object the ingress holds: see auth.configure)."""
    LIMITS.replace(spec)


def current() -> LimitsSpec:
    return LIMITS.spec


# -- body size and shape ----------------------------------------------------------------------------------
async def read_body(request: Request, cap: int) -> bytes:
    """The raw body, refused (413) as soon as it passes `cap` bytes rather than after buffering it all."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        raise RequestError("too_large", f"request body exceeds {cap} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise RequestError("too_large", f"request body exceeds {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _depth_and_longest(value: Any) -> tuple[int, int]:
    """Nesting depth and longest string (keys included) of a parsed JSON value, without recursion."""
    depth, longest = 0, 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, str):
            longest = max(longest, len(v))
        elif isinstance(v, dict):
            depth = max(depth, d)
            for k, item in v.items():
                longest = max(longest, len(k))
                stack.append((item, d + 1))
        elif isinstance(v, list):
            depth = max(depth, d)
            stack.extend((item, d + 1) for item in v)
    return depth, longest


def _tool_schema(tool: Any) -> Any:
    """The input schema of a tool in any of the three APIs' shapes."""
    if not isinstance(tool, dict):
        return tool
    fn = tool.get("function")
    if isinstance(fn, dict) and "parameters" in fn:
        return fn["parameters"]
    for name in ("input_schema", "parameters"):
        if name in tool:
            return tool[name]
    return tool


def check_body(data: Any, spec: LimitsSpec) -> None:
    """Raise RequestError when a parsed request body is past a configured limit."""
    depth, longest = _depth_and_longest(data)
    if depth > spec.max_json_depth:
        raise RequestError("invalid_request", f"request body is nested {depth} deep; the limit is {spec.max_json_depth}")
    if longest > spec.max_string_chars:
        raise RequestError("too_large", f"a string in the request body has {longest} characters; the limit is {spec.max_string_chars}")
    if not isinstance(data, dict):
        return
    for name in ("messages", "input"):
        items = data.get(name)
        if isinstance(items, list) and len(items) > spec.max_messages:
            raise RequestError("invalid_request", f"{name}: {len(items)} items; the limit is {spec.max_messages}", param=name)
    tools = data.get("tools")
    if isinstance(tools, list):
        if len(tools) > spec.max_tools:
            raise RequestError("invalid_request", f"tools: {len(tools)} tools; the limit is {spec.max_tools}", param="tools")
        for i, tool in enumerate(tools):
            d, _ = _depth_and_longest(_tool_schema(tool))
            if d > spec.max_tool_schema_depth:
                raise RequestError(
                    "invalid_request",
                    f"tools.{i}: input schema nested {d} deep; the limit is {spec.max_tool_schema_depth}",
                    param=f"tools.{i}",
                )


# -- per-key concurrency and rate -------------------------------------------------------------------------
@dataclass
class _Usage:
    in_flight: int = 0
    tokens: float = 0.0
    stamp: float = field(default=0.0)


class KeyLimiter:
    """Per-identity in-flight count and token bucket; `acquire` raises 429 instead of waiting."""

    def __init__(self, limits: Limits | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._limits = limits if limits is not None else LIMITS
        self._clock = clock
        self._usage: dict[str, _Usage] = {}

    def _entry(self, identity: str, rate: float, burst: float) -> _Usage:
        u = self._usage.get(identity)
        if u is None:
            if len(self._usage) >= _MAX_IDENTITIES:
                self._prune()
            u = self._usage[identity] = _Usage(tokens=burst, stamp=self._clock())
        return u

    def _prune(self) -> None:
        for k in [k for k, u in self._usage.items() if u.in_flight == 0][: _MAX_IDENTITIES // 2]:
            del self._usage[k]

    def acquire(self, identity: str) -> bool:
        """Take a slot for one request (True: release it after); raises RequestError('rate_limit')."""
        spec = self._limits.spec
        rpm, cap = spec.requests_per_minute_per_key, spec.max_concurrent_per_key
        if rpm is None and cap is None:
            return False
        rate = (rpm or 0.0) / 60.0
        burst = float(spec.burst_per_key or max(1, math.ceil(rpm or 1)))
        u = self._entry(identity, rate, burst)
        if cap is not None and u.in_flight >= cap:
            raise RequestError(
                "rate_limit",
                f"this API key already has {u.in_flight} requests in flight; the limit is {cap}",
                code="concurrency_limit_exceeded",
                retry_after=1.0,
            )
        if rpm is not None:
            now = self._clock()
            u.tokens = min(burst, u.tokens + (now - u.stamp) * rate)
            u.stamp = now
            if u.tokens < 1.0:
                raise RequestError(
                    "rate_limit",
                    f"this API key is over its limit of {rpm:g} requests per minute",
                    code="rate_limit_exceeded",
                    retry_after=(1.0 - u.tokens) / rate,
                )
            u.tokens -= 1.0
        u.in_flight += 1
        return True

    def release(self, identity: str) -> None:
        u = self._usage.get(identity)
        if u is not None and u.in_flight > 0:
            u.in_flight -= 1

    def in_flight(self, identity: str) -> int:
        u = self._usage.get(identity)
        return u.in_flight if u else 0


class KeyLimitsMiddleware:
    """Per-key limits on generation POSTs; the slot is held until the response (stream included) ends."""

    def __init__(self, app: ASGIApp, limiter: KeyLimiter | None = None, identity: Callable[[], str | None] | None = None) -> None:
        from agentserve.serve.auth import current_identity

        self.app = app
        self.limiter = limiter or KeyLimiter()  # reads the module's LIMITS when called, set by configure()
        self.identity = identity or current_identity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope.get("method") != "POST" or not path.startswith(GENERATION_PATHS):
            await self.app(scope, receive, send)
            return
        who = self.identity() or ""
        try:
            held = self.limiter.acquire(who)
        except RequestError as err:
            await error_response(path, err)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            if held:
                self.limiter.release(who)
