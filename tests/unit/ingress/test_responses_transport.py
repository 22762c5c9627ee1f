"""Codex's Responses details without Ray: namespaced tools decoded to one model-side name and encoded back as
namespace + name, the WebSocket frame encoding, WebSocket auth, the root probe, and the generated Codex config."""

from __future__ import annotations

import json
import tomllib

import orjson
import pytest
from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from agentserve.apis.codex import config as codex_config
from agentserve.apis.responses import ResponsesEncoder, ResponsesRequest, Sealer, decode
from agentserve.apis.responses.decode import qualified_name
from agentserve.config import ModelSpec
from agentserve.protocol import ToolCallBlock
from agentserve.protocol.errors import RequestError
from agentserve.protocol.events import Finish, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from agentserve.ingress.errors import ErrorEnvelopes
from agentserve.ingress.middleware.auth import AuthMiddleware, KeySet, current_identity, hash_key
from agentserve.ingress.handlers.responses_socket import error_frame
from agentserve.apis.origin import origin_after
from tests.support.keys import signing_key

SEALER = Sealer(signing_key("unit"))
NAMESPACE = {
    "type": "namespace",
    "name": "mcp__github__",
    "description": "GitHub MCP server",
    "tools": [
        {"type": "function", "name": "create_issue", "parameters": {"type": "object", "properties": {}}},
        {"type": "custom", "name": "raw_query", "description": "GraphQL text"},
    ],
}


def _decode(body: dict):
    return decode(ResponsesRequest.model_validate({"model": "m", **body}), request_id="r", model="m", sealer=SEALER,
                  caller="caller")


def test_namespace_tools_reach_the_model_under_one_name_each():
    decoded = _decode({"input": "hi", "tools": [NAMESPACE, {"type": "function", "name": "shell"}]})
    names = [t.name for t in decoded.request.conversation.tools]
    assert names == ["mcp__github__create_issue", "mcp__github__raw_query", "shell"]
    assert decoded.tool_kinds == {"mcp__github__create_issue": "function", "mcp__github__raw_query": "custom",
                                  "shell": "function"}  # fmt: skip
    assert decoded.namespaces["mcp__github__raw_query"] == ("mcp__github__", "raw_query")


def _encode(decoded, name: str, arguments: str) -> dict:
    enc = ResponsesEncoder(
        response_id="resp_1", request=ResponsesRequest(model="m", input="hi"), model_name="m", model_id="m",
        tool_kinds=decoded.tool_kinds, sealer=SEALER, origin=origin_after("caller", ()), count_tokens=len, namespaces=decoded.namespaces, sse=False,
    )  # fmt: skip
    frames = enc.start() + enc.encode(
        [ToolCallStart(0, "call_1", name), ToolCallArgsDelta(0, arguments), ToolCallEnd(0, arguments),
         Finish("stop")]  # fmt: skip
    )
    events = [orjson.loads(f) for f in frames]  # each frame is one bare JSON document (no SSE framing)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return next(e["item"] for e in events if e["type"] == "response.output_item.done")


def test_a_namespaced_call_goes_out_as_namespace_and_name_and_comes_back_the_same():
    decoded = _decode({"input": "hi", "tools": [NAMESPACE]})
    item = _encode(decoded, "mcp__github__create_issue", '{"title": "bug"}')
    assert (item["type"], item["namespace"], item["name"]) == ("function_call", "mcp__github__", "create_issue")
    echoed = {k: item[k] for k in ("type", "call_id", "namespace", "name", "arguments")}
    back = _decode({"input": [{"role": "user", "content": "hi"}, echoed], "tools": [NAMESPACE]})
    (call,) = back.request.conversation.turns[-1].blocks
    assert call == ToolCallBlock(id="call_1", name="mcp__github__create_issue", arguments='{"title": "bug"}')


@given(st.text(min_size=0, max_size=300))
def test_custom_tool_input_round_trips_byte_for_byte(text):
    decoded = _decode({"input": "hi", "tools": [NAMESPACE]})
    arguments = json.dumps({"input": text}, ensure_ascii=False)  # how the model writes a freeform call
    item = _encode(decoded, "mcp__github__raw_query", arguments)
    assert item["type"] == "custom_tool_call" and item["input"] == text and item["namespace"] == "mcp__github__"
    back = _decode({"input": [{"role": "user", "content": "hi"}, {k: item[k] for k in
                    ("type", "call_id", "namespace", "name", "input")}], "tools": [NAMESPACE]})  # fmt: skip
    (call,) = back.request.conversation.turns[-1].blocks
    assert call.name == "mcp__github__raw_query" and call.arguments == arguments  # rendered as the model wrote it


@pytest.mark.parametrize("namespace, name, expected", [
    ("mcp__fs__", "read", "mcp__fs__read"), ("crm", "lookup", "crm__lookup"), (None, "shell", "shell")])  # fmt: skip
def test_qualified_names(namespace, name, expected):
    assert qualified_name(namespace, name) == expected


def test_prewarm_may_carry_only_instructions_and_developer_items():
    developer = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox."}]}
    assert _decode({"instructions": "Be brief.", "input": [developer], "generate": False}).request
    with pytest.raises(RequestError, match="at least one item"):
        _decode({"instructions": "Be brief.", "input": [developer]})


def test_error_frames_carry_the_status_and_the_apis_envelope():
    frame = json.loads(error_frame(RequestError("rate_limit", "slow down", retry_after=2.0)))
    assert frame["type"] == "error" and frame["status"] == 429
    assert frame["error"]["type"] == "rate_limit_error" and frame["headers"]["retry-after"] == "2"


def _app() -> FastAPI:
    app = FastAPI()

    @app.websocket("/v1/responses")
    async def socket(ws: WebSocket):
        await ws.accept()
        await ws.send_json({"who": current_identity()})
        await ws.close()

    @app.get("/")
    async def root():
        return JSONResponse({"status": "ok"})

    app.add_middleware(AuthMiddleware, keys=KeySet([hash_key("sk-1")]), envelopes=ErrorEnvelopes())
    return app


def test_websocket_needs_a_key_and_knows_whose_it_is():
    client = TestClient(_app())
    with client.websocket_connect("/v1/responses", headers={"Authorization": "Bearer sk-1"}) as ws:
        assert ws.receive_json() == {"who": hash_key("sk-1")}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with pytest.raises(Exception) as refused:  # refused before the upgrade: nothing is sent to the caller
            with client.websocket_connect("/v1/responses", headers=headers) as ws:
                ws.receive_json()
        assert isinstance(refused.value, WebSocketDisconnect) or getattr(refused.value, "status_code", None) == 401


def test_root_probe_is_open_and_says_nothing():
    resp = TestClient(_app()).get("/")
    assert resp.status_code == 200 and resp.json() == {"status": "ok"}


def test_codex_config_enables_the_websocket_transport():
    config = tomllib.loads(codex_config.config_toml([ModelSpec()], base_url="http://h:1/v1", catalog_path="/c.json"))
    provider = config["model_providers"]["agentserve"]
    assert provider["supports_websockets"] is True and provider["wire_api"] == "responses"
    # Ray Serve would end the session's socket at request_timeout_s (600 s in serve_config.yaml) without this.
    assert provider["http_headers"] == {"x-request-timeout-seconds": "86400"}
