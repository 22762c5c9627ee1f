"""Request limits: what one body may contain, and how much one API key may use at once and per minute.

Body limits are checked on the parsed JSON before any model sees it, so a hostile body (a million messages or
content blocks anywhere, a 100 MB string, a tool schema nested 10,000 deep) costs one walk that stops at the first
limit passed and a 400/413, never a render or a tokenizer run. Per-key limits answer 429 with `retry-after` at once: agents retry, so queueing here would
only hide the overload (the router's bounded admission queue is the one place requests wait).

Per-key limits are held in the state backend (agentserve/state), so they are global across ingress replicas:
concurrency as leases with an expiry, renewed while the request lives and released on every exit (a crashed
ingress's slots expire), rate as one token bucket row per key updated atomically. Without per-key limits
configured there is no database access at all.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from agentserve.config import LimitsSpec, StateSpec
from agentserve.protocol.errors import RequestError
from agentserve.ingress.errors import ErrorEnvelopes
from agentserve.state import StateBackend, open_backend

logger = logging.getLogger("ray.serve")

# Paths whose POSTs run the model, the preprocessor or the tokenizer; per-key limits apply to these (token counting
# and /tokenize render the template, /detokenize decodes: as much CPU per request as a generation's preamble).
GENERATION_PATHS = ("/v1/messages", "/v1/chat/completions", "/v1/responses")
TOKENIZER_PATHS = ("/tokenize", "/detokenize", "/v1/tokenize", "/v1/detokenize")


def limited(method: str | None, path: str) -> bool:
    """Whether a request counts against its key's concurrency and rate: every POST that costs model, template or
    tokenizer work (GETs of models and stored responses, /health and /metrics do not)."""
    if method != "POST":
        return False
    return path.startswith(GENERATION_PATHS) or path.rstrip("/") in TOKENIZER_PATHS


_PRUNE_EVERY_S = 300.0  # how often an ingress sweeps expired leases and idle buckets out of the database


class Limits:
    """The configured LimitsSpec and the state backend its per-key usage lives in.

    state None: per-key usage is kept in an in-memory database of this process only (unit use).
    """

    def __init__(self, spec: LimitsSpec | None = None, state: StateSpec | None = None) -> None:
        self.spec = spec or LimitsSpec()
        self.state = state


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


def _walk(value: Any, spec: LimitsSpec, depth_cap: int, where: str = "the request body", *, strings: bool = True) -> None:
    """One pass over a parsed JSON value that refuses it as soon as a limit is passed: at most `max_json_items`
    elements and members counted (each container by its length, before its children are visited, so a huge array
    costs one `len`), containers past `depth_cap` refused before they are entered, strings past `max_string_chars`
    (`strings` False: not looked at, for a document too short to hold one that long).
    Linear in what it visits and never more than the limits; the stack holds containers, not one entry per item."""
    items, longest = 0, 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    containers = (dict, list)
    while stack:
        v, d = stack.pop()
        if isinstance(v, str):
            longest = max(longest, len(v))
            continue
        if not isinstance(v, containers):
            continue
        if d > depth_cap:
            raise RequestError("invalid_request", f"{where} is nested more than {depth_cap} deep (the limit)")
        items += len(v)
        if items > spec.max_json_items:
            raise RequestError(
                "too_large",
                f"{where} holds more than {spec.max_json_items} array elements and object members (at any depth); "
                f"the limit is {spec.max_json_items}",
            )
        children = v.values() if isinstance(v, dict) else v
        if not strings:
            stack.extend([(item, d + 1) for item in children if isinstance(item, containers)])
            continue
        if isinstance(v, dict):
            for k in v:
                longest = max(longest, len(k))
        for item in children:
            if isinstance(item, str):
                longest = max(longest, len(item))
            elif isinstance(item, containers):
                stack.append((item, d + 1))
        if longest > spec.max_string_chars:
            raise RequestError(
                "too_large", f"a string in {where} has {longest} characters; the limit is {spec.max_string_chars}"
            )


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


def check_body(data: Any, spec: LimitsSpec, size: int | None = None) -> None:
    """Raise RequestError when a parsed request body is past a configured limit (one bounded walk, then the
    counts of the fields that have their own limit, then each tool schema's depth). `size`: the document's length
    as sent (bytes or characters); no string in it is longer, so at most `max_string_chars` its strings are not
    measured."""
    _walk(data, spec, spec.max_json_depth, strings=size is None or size > spec.max_string_chars)
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
            try:  # the schemas are part of the body already walked: this pass is bounded by that one
                _walk(_tool_schema(tool), spec, spec.max_tool_schema_depth, f"tools.{i}: input schema")
            except RequestError as err:
                raise RequestError(err.kind, err.message, param=f"tools.{i}") from None


# -- per-key concurrency and rate -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Held:
    """One request's hold on its key's limits; `KeyLimiter.release` it when the response ends."""

    identity: str
    lease_id: str | None  # None: only the rate limit applies, nothing to release


class KeyLimiter:
    """Per-identity concurrency leases and token bucket in the state backend; `acquire` raises 429, never waits.

    acquire, release and renew block on the database: on an event loop, call them through a thread.
    """

    def __init__(
        self,
        limits: Limits,
        clock: Callable[[], float] = time.time,  # wall clock: other processes read the same rows
        backend: StateBackend | None = None,  # None: opened from limits.state on first use
    ) -> None:
        self._limits = limits
        self._clock = clock
        self._fixed_backend = backend
        self._backend: StateBackend | None = None
        self._backend_state: StateSpec | None = None
        self._lock = threading.Lock()
        self._live: set[str] = set()  # leases of requests still running in this process: renewed
        self._renewer: asyncio.Task | None = None
        self._last_prune = 0.0
        self.unavailable = 0  # requests admitted unlimited because the database failed

    def active(self) -> bool:
        """Whether any per-key limit is configured (if not, the middleware does nothing at all)."""
        spec = self._limits.spec
        return spec.max_concurrent_per_key is not None or spec.requests_per_minute_per_key is not None

    def backend(self) -> StateBackend:
        if self._fixed_backend is not None:
            return self._fixed_backend
        with self._lock:
            state = self._limits.state
            if self._backend is None or self._backend_state != state:
                old = self._backend
                if state is None:
                    from agentserve.state.sqlite import SQLiteBackend

                    self._backend = SQLiteBackend(":memory:")
                else:
                    self._backend = open_backend(state)
                self._backend_state = state
                if old is not None:
                    old.close()
            return self._backend

    def acquire(self, identity: str) -> Held | None:
        """Take a slot for one request (None: no limits configured, or the database cannot say); raises
        RequestError('rate_limit'). Fails open: limits protect capacity, and a database outage must not turn every
        request into a 500 (a warning says the limits are not enforced meanwhile)."""
        spec = self._limits.spec
        if spec.requests_per_minute_per_key is None and spec.max_concurrent_per_key is None:
            return None
        try:
            return self._acquire(identity)
        except RequestError:
            raise
        except Exception:  # noqa: BLE001 - the state database is unreachable or refused
            self.unavailable += 1
            if self.unavailable & (self.unavailable - 1) == 0:  # the 1st, 2nd, 4th ... time: no log flood
                logger.warning(
                    "per-key limits: the state database failed (%d times so far); admitting without limits",
                    self.unavailable, exc_info=True,
                )
            return None

    def _acquire(self, identity: str) -> Held:
        spec = self._limits.spec
        rpm, cap = spec.requests_per_minute_per_key, spec.max_concurrent_per_key
        db = self.backend()
        now = self._clock()
        rate = (rpm or 0.0) / 60.0
        burst = float(spec.burst_per_key or max(1, math.ceil(rpm or 1)))
        if now - self._last_prune > _PRUNE_EVERY_S:
            self._last_prune = now
            db.prune(now, buckets_idle_s=burst / rate if rate else 0.0)
        lease_id = None
        if cap is not None:
            lease_id = uuid.uuid4().hex
            grant = db.acquire_lease(identity, lease_id, cap, now, spec.lease_ttl_s)
            if not grant.granted:
                raise RequestError(
                    "rate_limit",
                    f"this API key already has {grant.held} requests in flight; the limit is {cap}",
                    code="concurrency_limit_exceeded",
                    retry_after=1.0,
                )
        if rpm is not None:
            token = db.take_token(identity, now, rate, burst)
            if not token.granted:
                if lease_id is not None:
                    db.release_lease(lease_id)
                raise RequestError(
                    "rate_limit",
                    f"this API key is over its limit of {rpm:g} requests per minute",
                    code="rate_limit_exceeded",
                    retry_after=token.retry_after_s,
                )
        return Held(identity, lease_id)

    def track(self, held: Held) -> None:
        """Renew this request's lease until it is released: on the calling event loop's renewal task, or by
        calls to `renew` when there is no running loop."""
        if held.lease_id is None:
            return
        with self._lock:
            self._live.add(held.lease_id)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = self._renewer
        if task is None or task.done() or task.get_loop() is not loop:
            self._renewer = loop.create_task(self._renew_forever(), name="agentserve-lease-renewer")

    def release(self, held: Held) -> None:
        """Give the slot back. Never raises: a lease that cannot be deleted now expires on its own."""
        if held.lease_id is None:
            return
        with self._lock:
            self._live.discard(held.lease_id)
        try:
            self.backend().release_lease(held.lease_id)
        except Exception:
            logger.warning("could not release a concurrency lease; it expires in %ss", self._limits.spec.lease_ttl_s, exc_info=True)

    def renew(self) -> None:
        """Extend every live lease of this process (one statement for all of them)."""
        with self._lock:
            live = list(self._live)
        if live:
            self.backend().renew_leases(live, self._clock(), self._limits.spec.lease_ttl_s)

    def in_flight(self, identity: str) -> int:
        """Live leases of a key across every ingress replica."""
        return self.backend().count_leases(identity, self._clock())

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self._limits.spec.lease_ttl_s / 3)
            try:
                await asyncio.to_thread(self.renew)
            except Exception:
                logger.warning("could not renew concurrency leases", exc_info=True)


class KeyLimitsMiddleware:
    """Per-key limits on generation and tokenizer POSTs (`limited`); the slot is held until the response (stream included) ends."""

    def __init__(
        self,
        app: ASGIApp,
        limiter: KeyLimiter,
        envelopes: ErrorEnvelopes | None = None,
        identity: Callable[[], str | None] | None = None,
    ) -> None:
        from agentserve.ingress.middleware.auth import current_identity

        self.app = app
        self.limiter = limiter
        self._envelopes = envelopes or ErrorEnvelopes()
        self.identity = identity or current_identity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or not limited(scope.get("method"), path)
            or not self.limiter.active()  # no per-key limits: no database, no thread hop
        ):
            await self.app(scope, receive, send)
            return
        who = self.identity() or ""
        acquiring = asyncio.ensure_future(asyncio.to_thread(self.limiter.acquire, who))
        try:
            held = await asyncio.shield(acquiring)
        except RequestError as err:
            await self._envelopes.response(path, err)(scope, receive, send)
            return
        except asyncio.CancelledError:
            # The client left while the database answered: give back whatever the thread still grants.
            acquiring.add_done_callback(self._release_granted)
            raise
        if held is None:  # limits were switched off meanwhile
            await self.app(scope, receive, send)
            return
        self.limiter.track(held)
        try:
            await self.app(scope, receive, send)
        finally:
            if held.lease_id is not None:
                # Shielded: a cancelled request still releases its slot (the thread runs to the end).
                await asyncio.shield(asyncio.to_thread(self.limiter.release, held))

    def _release_granted(self, fut: "asyncio.Future[Held | None]") -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        held = fut.result()
        if held is not None and held.lease_id is not None:
            asyncio.get_running_loop().run_in_executor(None, self.limiter.release, held)
