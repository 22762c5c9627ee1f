"""A pass-through HTTP proxy between a harness CLI and the graph that records each generation request as the
harness sees it: path, time to first token, and the response headers a user would look at (`x-agentserve-prefix`,
`x-agentserve-max-tokens-clamped`). Harnesses do not show response headers; this is how a test or benchmark reads
them per turn without touching the harness.

Time to first token is measured at the proxy, from the request's arrival to the first SSE event that carries
model output (Anthropic `content_block_start`, Responses `response.output_item.added`, Chat Completions a chunk
with a delta), so events sent before generation (message_start, pings) do not count.

A WebSocket upgrade (Codex's Responses transport) is tunnelled byte for byte, without compression (the offer of
`permessage-deflate` is dropped), and each `response.create` the client sends is one exchange, timed by the frames
the server sends back until its `response.completed` / `response.failed`.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

_OUTPUT_EVENTS = (b"event: content_block_start", b"event: response.output_item.added", b'"delta":')
_HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
_WS_ENDS = (b'"response.completed"', b'"response.failed"', b'"response.incomplete"', b'"error"')


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
        usage: dict[str, int] = {}
        for line in self.response.decode("utf-8", "replace").splitlines():
            if line.startswith("data:") and '"message_delta"' in line:
                usage = json.loads(line[5:]).get("usage", usage)
        if not usage and self.response.startswith(b"{"):
            usage = json.loads(self.response).get("usage", {})
        return usage

    def tokens(self) -> dict[str, int | None]:
        """prompt / cached / output tokens as the response reported them, whichever API it came through."""
        if "/v1/messages" in self.path:
            u = self.anthropic_usage()
            prompt = (u.get("input_tokens") or 0) + (u.get("cache_read_input_tokens") or 0) if u else None
            return {"prompt": prompt, "cached": u.get("cache_read_input_tokens"), "output": u.get("output_tokens")}
        u = _responses_usage(self.response)
        return {"prompt": u.get("input_tokens"), "cached": (u.get("input_tokens_details") or {}).get("cached_tokens"),
                "output": u.get("output_tokens")}

    def output_text(self) -> str:
        """The text, thinking and tool input the response streamed, joined (Anthropic deltas, Responses `*.delta`)."""
        out = []
        for line in self.response.decode("utf-8", "replace").splitlines():
            line = line[5:] if line.startswith("data:") else line
            if '"delta"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            delta = event.get("delta")
            if isinstance(delta, dict):
                out.append(delta.get("text") or delta.get("thinking") or delta.get("partial_json") or "")
            elif isinstance(delta, str) and str(event.get("type", "")).endswith(".delta"):
                out.append(delta)
        return "".join(out)

    def prefix_reuse(self) -> float | None:
        """reuse= of `x-agentserve-prefix`, None when the server had no earlier turn of this session."""
        value = self.headers.get("x-agentserve-prefix")
        if not value:
            return None
        fields = dict(part.strip().split("=", 1) for part in value.split(";") if "=" in part)
        return float(fields["reuse"])


def _responses_usage(body: bytes) -> dict:
    """The usage of a Responses stream's (or WebSocket turn's) last `response.completed`, or of a JSON response."""
    usage: dict = {}
    for line in body.decode("utf-8", "replace").splitlines():
        line = line[5:] if line.startswith("data:") else line
        if '"response.completed"' in line or '"response.incomplete"' in line:
            try:
                usage = (json.loads(line).get("response") or {}).get("usage") or usage
            except ValueError:
                pass
    if not usage and body.startswith(b"{"):
        try:
            usage = json.loads(body).get("usage") or {}
        except ValueError:
            pass
    return usage


class _Frames:
    """WebSocket frames out of a byte stream as it arrives: (opcode, payload), unmasked (RFC 6455 section 5.2)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        out = []
        while len(self._buf) >= 2:
            b0, b1 = self._buf[0], self._buf[1]
            n, at = b1 & 0x7F, 2
            if n == 126:
                if len(self._buf) < 4:
                    break
                n, at = int.from_bytes(self._buf[2:4], "big"), 4
            elif n == 127:
                if len(self._buf) < 10:
                    break
                n, at = int.from_bytes(self._buf[2:10], "big"), 10
            mask = b""
            if b1 & 0x80:
                mask, at = bytes(self._buf[at:at + 4]), at + 4
            if len(self._buf) < at + n:
                break
            payload = bytes(self._buf[at:at + n])
            if mask:
                payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
            out.append((b0 & 0x0F, payload))
            del self._buf[:at + n]
        return out


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

    def model_requests(self) -> list[Exchange]:
        """Every generation request, whichever API and transport: Messages, Responses (HTTP and WebSocket turns),
        Chat Completions; in arrival order."""
        paths = ("/v1/messages", "/v1/responses", "/v1/chat/completions")
        with self._lock:
            return [e for e in self.exchanges if (e.method == "WS" or e.method == "POST" and any(
                p in e.path for p in paths)) and "count_tokens" not in e.path]

    def _handler(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _tunnel(self) -> None:
                """A WebSocket: forward the upgrade, then pipe both ways, one exchange per response.create."""
                host, port = httpx.URL(proxy.upstream).host, httpx.URL(proxy.upstream).port or 80
                up = socket.create_connection((host, port), timeout=10)
                up.settimeout(None)
                head = [f"{self.command} {self.path} HTTP/1.1", f"Host: {host}:{port}"]
                head += [f"{k}: {v}" for k, v in self.headers.items()
                         if k.lower() not in ("host", "sec-websocket-extensions")]
                up.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
                current: list[Exchange] = []

                def client_to_server() -> None:
                    frames = _Frames()
                    try:
                        while data := self.connection.recv(65536):
                            for op, payload in frames.feed(data):
                                if op == 1 and b'"response.create"' in payload:
                                    ex = Exchange("WS", self.path, status=101, started=time.perf_counter(),
                                                  body=payload, request_headers=dict(self.headers.items()))
                                    with proxy._lock:
                                        proxy.exchanges.append(ex)
                                    current.append(ex)
                            up.sendall(data)
                    except OSError:
                        pass
                    finally:
                        try:
                            up.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass

                pump = threading.Thread(target=client_to_server, daemon=True)
                frames = _Frames()
                first = True
                try:
                    while data := up.recv(65536):
                        if first:  # the 101 head: the upgrade's response, passed on as is
                            first = False
                            head_end = data.find(b"\r\n\r\n")
                            self.connection.sendall(data[:head_end + 4])
                            pump.start()
                            data = data[head_end + 4:]
                        for op, payload in frames.feed(data):
                            ex = next((e for e in current if e.total_s is None), None)
                            if op != 1 or ex is None:
                                continue
                            if ex.ttft_s is None and b"response.output_item.added" in payload:
                                ex.ttft_s = time.perf_counter() - ex.started
                            ex.response += payload + b"\n"
                            if any(m in payload[:80] for m in _WS_ENDS):
                                ex.total_s = time.perf_counter() - ex.started
                        self.connection.sendall(data)
                except OSError:
                    pass
                finally:
                    up.close()
                    self.close_connection = True

            def _forward(self) -> None:
                if self.headers.get("upgrade", "").lower() == "websocket":
                    return self._tunnel()
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
