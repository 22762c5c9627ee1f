"""The HAProxy config `agentserve-haproxy` runs (serve/haproxy_front.py): Serve's generated one with a request-head
deadline, per-source limits and Serve's client-controlled headers bounded. Checked with the real bundled binary:
the config is valid, and what a backend receives for each header a client may send."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentserve.ports import free_port
from agentserve.serve.haproxy_front import MARK, FrontLimits, harden, hardened_args, real_binary

ECHO = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"port": sys.argv[1], "headers": [[k.lower(), v] for k, v in self.headers.items()]}).encode()
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def serve_like(front: int, back: int, stats: int, back2: int | None = None) -> str:
    """The parts of Serve's generated config (ray/serve/_private/haproxy_templates.py) that harden() edits."""
    return f"""global
    maxconn 100
defaults
    mode http
    timeout connect 5s
    timeout client 3600s
    timeout server 3600s
    option abortonclose
frontend prometheus
    bind 127.0.0.1:{stats}
    mode http
    no log
frontend http_frontend
    bind 127.0.0.1:{front}
    acl routes path -i /-/routes
    default_backend http-app
backend http-app
    server s1 127.0.0.1:{back}
    server s2 127.0.0.1:{back2 or back}
"""


def test_harden_adds_the_deadline_and_the_front_rules_once():
    text = harden(serve_like(1, 2, 3), FrontLimits())
    assert "timeout http-request 30s" in text and text.count(MARK) == 4
    assert harden(text, FrontLimits()) == text  # a reload of the hardened copy changes nothing
    frontend = text.split("frontend http_frontend")[1].split("backend http-app")[0]
    assert "del-header x-request-disconnect-disabled" in frontend and "sc0_conn_cur gt 256" in frontend
    set_by_serve = serve_like(1, 2, 3).replace("timeout server 3600s", "timeout server 3600s\n    timeout http-request 9s")
    assert harden(set_by_serve, FrontLimits()).count("timeout http-request") == 1  # Serve's own wins


def test_limits_come_from_the_environment():
    env = {"AGENTSERVE_HAPROXY_HTTP_REQUEST_TIMEOUT_S": "5", "AGENTSERVE_MAX_REQUEST_TIMEOUT_S": "600",
           "AGENTSERVE_HAPROXY_MAX_CONN_PER_SOURCE": "junk"}  # fmt: skip
    assert FrontLimits.from_env(env) == FrontLimits(5, 256, 2000, 600)


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    """The real HAProxy on the hardened config (max request timeout 600 s) in front of a header echo."""
    tmp: Path = tmp_path_factory.mktemp("haproxy")
    front, back, back2, stats = free_port(), free_port(), free_port(), free_port()
    cfg = tmp / "haproxy.cfg"
    cfg.write_text(serve_like(front, back, stats, back2))
    args = hardened_args(["-db", "-f", str(cfg)], FrontLimits(max_request_timeout_s=600))
    assert args[-1] == str(cfg) + ".agentserve"
    binary = real_binary()
    assert subprocess.run([binary, "-c", "-f", args[-1]], capture_output=True).returncode == 0
    echoes = [subprocess.Popen([sys.executable, "-c", ECHO, str(port)]) for port in (back, back2)]
    proxy = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{front}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if len({_server(url, []) for _ in range(6)}) == 2:  # both echoes up
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        for p in (proxy, *echoes):
            p.terminate()
            p.wait(timeout=10)


def _server(url: str, headers: list[tuple[str, str]]) -> str:
    return json.loads(httpx.get(url, headers=headers, timeout=5).text)["port"]


def _seen(url: str, headers: list[tuple[str, str]]) -> list[str]:
    got = json.loads(httpx.get(url, headers=headers, timeout=5).text)["headers"]
    return [v for k, v in got if k == "x-request-timeout-seconds"] + [f"disc={v}" for k, v in got
                                                                       if k == "x-request-disconnect-disabled"]


@pytest.mark.parametrize(
    ("sent", "seen"),
    [
        ([("x-request-timeout-seconds", "86400")], ["600"]),  # clamped to the configured maximum
        ([("x-request-timeout-seconds", "99999999999")], []),  # too long to be a number of seconds: dropped
        ([("x-request-timeout-seconds", "120")], ["120"]),  # within it: kept
        ([("x-request-timeout-seconds", "0")], []),  # "no timeout": dropped, the default applies
        ([("x-request-timeout-seconds", "-1")], []),
        ([("x-request-timeout-seconds", "inf")], []),
        ([("x-request-timeout-seconds", "nan")], []),
        ([("x-request-timeout-seconds", "1e9")], []),
        ([("x-request-timeout-seconds", "30"), ("x-request-timeout-seconds", "0")], []),  # two: both dropped
        ([("x-request-disconnect-disabled", "?1")], []),  # never reaches Serve
    ],
)
def test_what_serve_sees_of_the_client_controlled_headers(front, sent, seen):
    assert _seen(front, sent) == seen


@pytest.mark.parametrize("header", ["x-agentserve-session-id", "x-claude-code-session-id", "session_id", "session-id"])
def test_a_sessions_requests_reach_one_ingress_replica_and_sessions_spread(front, header):
    """Each app's Ingress backend balances by the harness's session header: every request of a session reaches the
    same replica (whose memos of the session are warm); many sessions use every replica."""
    homes = {}
    for n in range(24):
        seen = {_server(front, [(header, f"session-{n}")]) for _ in range(4)}
        assert len(seen) == 1, (header, n, seen)
        homes[n] = seen.pop()
    assert len(set(homes.values())) == 2, homes
    # The first header found wins: ours over Claude Code's.
    if header != "x-agentserve-session-id":
        both = [("x-agentserve-session-id", "session-3"), (header, "session-4")]
        assert {_server(front, both) for _ in range(4)} == {_server(front, [("x-agentserve-session-id", "session-3")])}


def test_requests_without_a_session_header_still_use_every_replica(front):
    assert len({_server(front, []) for _ in range(8)}) == 2


def test_session_affinity_can_be_switched_off():
    off = FrontLimits.from_env({"AGENTSERVE_HAPROXY_SESSION_AFFINITY": "0"})
    assert not off.session_affinity and FrontLimits.from_env({}).session_affinity
    text = harden(serve_like(1, 2, 3), off)
    assert "balance hash" not in text and "agentserve_session" not in text
