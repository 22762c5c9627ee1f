"""A pass-through HTTP proxy between a harness CLI and the graph that records each generation request as the
harness sees it: path, time to first token, and the response headers a user would look at (`x-agentserve-prefix`,
`x-agentserve-max-tokens-clamped`). Harnesses do not show response headers; this is how a test or benchmark reads
them per turn without touching the harness.

Time to first token is measured at the proxy, from the request's arrival to the first SSE event that carries
model output (Anthropic `content_block_start`, Responses `response.output_item.added`, Chat Completions a chunk
with a delta), so events sent before generation (message_start, pings) do not count.
"""

from __future__ import annotations

import http.server
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

_OUTPUT_EVENTS = (b"event: content_block_start", b"event: response.output_item.added", b'"delta":')
_HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


@dataclass
class Exchange:
    method: str
    path: str
    status: int = 0
    started: float = 0.0
    ttft_s: float | None = None
    total_s: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # the request body
    request_headers: dict[str, str] = field(default_factory=dict)
    response: bytes = b""  # the response body as it reached the harness

    def anthropic_usage(self) -> dict[str, int]:
        """The final usage of an Anthropic Messages stream (its last message_delta) or JSON response."""
        import json

        usage: dict[str, int] = {}
        for line in self.response.decode("utf-8", "replace").splitlines():
            if line.startswith("data:") and '"message_delta"' in line:
                usage = json.loads(line[5:]).get("usage", usage)
        if not usage and self.response.startswith(b"{"):
            usage = json.loads(self.response).get("usage", {})
        return usage

    def prefix_reuse(self) -> float | None:
        """reuse= of `x-agentserve-prefix`, None when the server had no earlier turn of this session."""
        value = self.headers.get("x-agentserve-prefix")
        if not value:
            return None
        fields = dict(part.strip().split("=", 1) for part in value.split(";") if "=" in part)
        return float(fields["reuse"])


class RecordingProxy:
    """`with RecordingProxy(upstream) as proxy:` point the harness at proxy.url; proxy.exchanges lists requests."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "RecordingProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def generations(self, path_part: str = "/v1/messages") -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.method == "POST" and path_part in e.path and "count_tokens" not in e.path]

    def _handler(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                ex = Exchange(self.command, self.path, started=time.perf_counter())
                ex.body = self.rfile.read(int(self.headers.get("content-length") or 0))
                ex.request_headers = {k.lower(): v for k, v in self.headers.items()}
                with proxy._lock:
                    proxy.exchanges.append(ex)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                with httpx.Client(timeout=httpx.Timeout(1800.0, connect=10.0)) as client:
                    with client.stream(self.command, proxy.upstream + self.path, content=ex.body, headers=headers) as r:
                        ex.status = r.status_code
                        ex.headers = {k.lower(): v for k, v in r.headers.items()}
                        self.send_response(r.status_code)
                        for k, v in r.headers.items():
                            if k.lower() not in _HOP:
                                self.send_header(k, v)
                        if self.command == "HEAD" or r.status_code in (204, 304):
                            self.send_header("content-length", "0")
                            self.end_headers()
                            ex.total_s = time.perf_counter() - ex.started
                            return
                        self.send_header("transfer-encoding", "chunked")
                        self.end_headers()
                        for chunk in r.iter_raw():
                            if ex.ttft_s is None and any(m in chunk for m in _OUTPUT_EVENTS):
                                ex.ttft_s = time.perf_counter() - ex.started
                            ex.response += chunk
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                        self.wfile.write(b"0\r\n\r\n")
                ex.total_s = time.perf_counter() - ex.started

            do_GET = do_POST = do_HEAD = do_DELETE = _forward

        return Handler
