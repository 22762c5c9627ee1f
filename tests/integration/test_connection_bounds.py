"""What one client's connections may hold, on the real graph (issue 29): a Responses WebSocket's frames and
read-ahead are bounded, an idle one is closed, one key holds a bounded number of them, and a client cannot turn off
Serve's request timeout with `x-request-timeout-seconds: 0`, while the headers `agentserve codex-config` makes Codex
send keep a session's socket past it (without them the proxy would end the connection at request_timeout_s, 600 s in
serve_config.yaml, in the middle of the session)."""

from __future__ import annotations

import json
import time
import tomllib

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from agentserve.apis.codex import config as codex_config
from agentserve.config import ModelSpec
from agentserve.ingress.middleware.auth import hash_key
from tests.support.graph import running_graph

pytestmark = pytest.mark.integration

KEY_A, KEY_B = "tenant-a-key", "tenant-b-key"
TIMEOUT_S = 4  # Serve's request_timeout_s for this graph
IDLE_S = 1.5
ARGS = {
    "engine": {"kind": "scripted", "block_size": 16, "rules": [
        {"match": "slow", "reply": "one two three four five six seven eight nine ten", "itl_ms": 300},
        {"match": "", "reply": "OK.", "itl_ms": 0}]},  # fmt: skip
    "api_keys": [hash_key(KEY_A), hash_key(KEY_B)],
    "limits": {"max_websockets_per_key": 2, "ws_idle_timeout_s": IDLE_S, "max_ws_frame_bytes": 64 * 1024,
               "max_ws_queued_bytes": 128 * 1024},  # fmt: skip
}


def _codex_headers() -> dict[str, str]:
    """The http_headers of the provider `agentserve codex-config` writes: Codex sends them with every request."""
    config = tomllib.loads(codex_config.config_toml([ModelSpec()], base_url="http://h/v1", catalog_path="/c"))
    return config["model_providers"]["agentserve"]["http_headers"]


CODEX = _codex_headers()


@pytest.fixture(scope="module")
def ws_url(model_path):
    with running_graph(ARGS, http_options={"request_timeout_s": TIMEOUT_S}) as url:
        yield url.replace("http://", "ws://") + "/v1/responses"


def _open(url: str, key: str = KEY_A, codex: bool = True, **headers: str):
    sent = {"Authorization": f"Bearer {key}", **(CODEX if codex else {}), **headers}
    return connect(url, additional_headers=sent, open_timeout=30)


def _create(text: str = "hi") -> str:
    return json.dumps({"type": "response.create", "model": "smollm2", "input": text, "store": False})


def _turn(ws, text: str = "hi") -> dict:
    ws.send(_create(text))
    while True:
        event = json.loads(ws.recv(timeout=30))
        if event["type"] in ("response.completed", "response.failed", "error"):
            return event


def _closed_code(ws, within_s: float) -> int | None:
    try:
        while True:
            ws.recv(timeout=within_s)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else None
    except TimeoutError:
        return -1


def test_an_oversized_frame_is_refused_and_the_connection_stays_usable(ws_url):
    with _open(ws_url) as ws:
        ws.send(_create("x" * (100 * 1024)))
        event = json.loads(ws.recv(timeout=30))
        assert event["type"] == "error" and event["status"] == 413, event
        assert _turn(ws)["type"] == "response.completed"


def test_frames_piled_ahead_of_a_response_close_the_connection(ws_url):
    with _open(ws_url) as ws:
        ws.send(_create("slow"))  # answered for ~3 s while the client keeps sending
        for _ in range(12):
            ws.send(_create("again"))
        assert _closed_code(ws, 20) == 1008


def test_an_idle_connection_is_closed(ws_url):
    with _open(ws_url) as ws:
        assert _turn(ws)["type"] == "response.completed"
        assert _closed_code(ws, IDLE_S + 5) == 1000  # nothing sent, nothing in progress: closed after IDLE_S
    with _open(ws_url) as ws:  # a turn in progress is not idle, however long it takes
        assert _turn(ws, "slow")["type"] == "response.completed"


def test_one_key_holds_a_bounded_number_of_sockets_and_other_keys_are_unaffected(ws_url):
    with _open(ws_url) as first, _open(ws_url) as second:
        with pytest.raises(InvalidStatus) as refused:
            _open(ws_url)
        assert refused.value.response.status_code == 429
        with _open(ws_url, KEY_B) as other:  # another tenant still connects
            assert _turn(other)["type"] == "response.completed"
        assert _turn(first)["type"] == _turn(second)["type"] == "response.completed"
    time.sleep(0.5)  # the server counts the close
    with _open(ws_url) as again:
        assert _turn(again)["type"] == "response.completed"


@pytest.mark.parametrize("headers", [{"x-request-timeout-seconds": "0", "x-request-disconnect-disabled": "?1"}, {}],
                         ids=["timeout turned off", "no codex-config headers"])
def test_a_client_cannot_turn_off_the_request_timeout(ws_url, headers):
    with _open(ws_url, codex=False, **headers) as ws:
        started = time.monotonic()
        with pytest.raises(ConnectionClosed):
            while time.monotonic() - started < TIMEOUT_S + 4:  # never idle: a turn a second
                assert _turn(ws)["type"] == "response.completed"
                time.sleep(1)
        assert time.monotonic() - started < TIMEOUT_S + 4


def test_codex_config_headers_keep_the_session_socket_past_request_timeout(ws_url):
    assert "x-request-timeout-seconds" in CODEX
    with _open(ws_url) as ws:
        started = time.monotonic()
        while time.monotonic() - started < TIMEOUT_S + 2:
            assert _turn(ws)["type"] == "response.completed"
            time.sleep(1)
