"""A Codex session's WebSocket outlives Ray Serve's request_timeout_s when the client names its own timeout, which is
what `agentserve codex-config` makes Codex send (`x-request-timeout-seconds` in the provider's http_headers): without
it the proxy ends the connection at request_timeout_s (600 s in serve_config.yaml) in the middle of the session."""

from __future__ import annotations

import json
import time
import tomllib

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from agentserve.apis.codex import config as codex_config
from agentserve.config import ModelSpec
from tests.support.graph import running_graph

pytestmark = pytest.mark.integration

ARGS = {"engine": {"kind": "scripted", "block_size": 16, "rules": [{"match": "", "reply": "OK.", "itl_ms": 0}]}}
TIMEOUT_S = 3


@pytest.fixture(scope="module")
def short_timeout_graph(model_path):
    with running_graph(ARGS, http_options={"request_timeout_s": TIMEOUT_S}) as url:
        yield url.replace("http://", "ws://") + "/v1/responses"


def _turn(ws) -> str:
    ws.send(json.dumps({"type": "response.create", "model": "smollm2", "input": "hi", "store": False}))
    while True:
        event = json.loads(ws.recv(timeout=30))
        if event["type"] in ("response.completed", "response.failed", "error"):
            return event["type"]


def test_codex_config_headers_keep_the_session_socket_past_request_timeout(short_timeout_graph):
    config = tomllib.loads(codex_config.config_toml([ModelSpec()], base_url="http://h/v1", catalog_path="/c"))
    headers = config["model_providers"]["agentserve"]["http_headers"]
    with connect(short_timeout_graph, additional_headers=headers, open_timeout=30) as ws:
        assert _turn(ws) == "response.completed"
        time.sleep(TIMEOUT_S + 2)
        assert _turn(ws) == "response.completed"  # same connection, past request_timeout_s
    with connect(short_timeout_graph, open_timeout=30) as ws:  # without them the proxy cuts the session
        time.sleep(TIMEOUT_S + 2)
        with pytest.raises(ConnectionClosed):
            _turn(ws)
