"""Ray Serve's client-controlled request headers, bounded in the Ingress replica that reads them.

Serve lets any client set its own request timeout (`x-request-timeout-seconds`: a positive number replaces
`http_options.request_timeout_s`, 0 or less turns the timeout off) and turn off the abort on disconnect
(`x-request-disconnect-disabled: ?1`: the request runs on after its client left). Both are read by Serve itself in
the replica that serves HTTP (HAProxy mode's direct ingress), before the request reaches the app, so no middleware
can filter them. `install` replaces Serve's two parsers in this process with bounded ones: a timeout is honoured up
to ServeArgs.limits.max_request_timeout_s (Codex asks for 86400 s on its session socket), anything else (0,
negative, inf, nan, not a number) falls back to the configured request_timeout_s, and the disconnect switch is
ignored. HAProxy drops and clamps the same headers in front (haproxy_front.py), for the fallback proxy behind it.

The two names are checked to exist in the installed Ray (tests/unit/serve), so a Ray upgrade that moves them fails
a test, not silently.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Optional

TIMEOUT_HEADER = b"x-request-timeout-seconds"
DISCONNECT_HEADER = b"x-request-disconnect-disabled"
PATCHED = ("parse_request_timeout_header", "parse_disconnect_disabled_header")


def bounded_timeout(raw: bytes | None, default_s: Optional[float], maximum_s: float) -> Optional[float]:
    """The request timeout to apply: the client's, if a finite positive number, at most maximum_s; else default_s
    (the configured one; None means Serve's own "no timeout" only when the operator configured none)."""
    if raw is None:
        return default_s
    try:
        asked = float(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return default_s
    if not math.isfinite(asked) or asked <= 0:
        return default_s
    return min(asked, maximum_s)


def timeout_parser(maximum_s: float) -> Callable[[Mapping[bytes, bytes], Optional[float]], Optional[float]]:
    def parse_request_timeout_header(headers: Mapping[bytes, bytes], default_timeout_s: Optional[float]) -> Optional[float]:
        return bounded_timeout(headers.get(TIMEOUT_HEADER), default_timeout_s, maximum_s)

    return parse_request_timeout_header


def parse_disconnect_disabled_header(headers: Mapping[bytes, bytes]) -> bool:
    """Never: a client that leaves always ends its request (it would otherwise hold an engine slot for nobody)."""
    return False


def install(maximum_s: float) -> None:
    """Bound both headers for every request this process's direct ingress serves (call before it starts: the
    Ingress replica's constructor)."""
    from ray.serve._private import replica

    missing = [name for name in PATCHED if not hasattr(replica, name)]
    if missing:
        raise RuntimeError(f"ray.serve._private.replica has no {missing}: Ray changed how it reads client headers")
    replica.parse_request_timeout_header = timeout_parser(maximum_s)  # type: ignore[attr-defined]
    replica.parse_disconnect_disabled_header = parse_disconnect_disabled_header  # type: ignore[attr-defined]
