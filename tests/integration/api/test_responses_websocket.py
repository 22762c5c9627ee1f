"""Codex's Responses transports against the real graph (scripted engine): the WebSocket (`response.create` frames,
the `generate: false` pre-warm, `previous_response_id` on one connection), `POST /v1/responses/input_tokens`,
namespaced (MCP) and custom tools round-tripped exactly, and the `HEAD /` / `GET /` probes."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import openai
import pytest
from websockets.sync.client import connect

from tests.integration.graph_probe import engine_active, router_stats
from agentserve.bench.graph import wait_for
from tests.integration.api.test_responses_events import PATCH_TOOL, SHELL_TOOL, codex_turn, raw_stream
from tests.integration.responses_rules import PATCH

pytestmark = pytest.mark.integration

TERMINAL = {"response.completed", "response.failed", "response.incomplete", "error"}
MCP_NAMESPACE = {
    "type": "namespace",
    "name": "mcp__docs__",
    "description": "Tools of the docs MCP server",
    "tools": [
        {
            "type": "function",
            "name": "search",
            "description": "Search the docs",
            "strict": False,
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        }
    ],
}


@pytest.fixture(scope="module")
def client(graph_url):
    return openai.OpenAI(base_url=f"{graph_url}/v1", api_key="test-key")


def ws_url(graph_url: str) -> str:
    return graph_url.replace("http://", "ws://") + "/v1/responses"


def exchange(ws, frame: dict, keepalives: list | None = None) -> list[dict]:
    """Send one request frame; every event up to the terminal one (each a JSON text frame). Keep-alive frames
    (sent during gaps longer than the graph's keepalive_interval_s) go to `keepalives`."""
    ws.send(json.dumps(frame))
    events = []
    while True:
        message = ws.recv(timeout=60)
        assert isinstance(message, str)  # text frames only
        event = json.loads(message)
        if event == {"type": "keepalive"}:
            (keepalives if keepalives is not None else []).append(event)
            continue
        events.append(event)
        if event["type"] in TERMINAL:
            return events


def create(body: dict, **extra) -> dict:
    return {"type": "response.create", **body, "stream": True, **extra}


def shape(events: list[dict]) -> list[tuple]:
    """What a stream says, with ids, times and the chunking of deltas left out."""
    out: list[tuple] = []
    for e in events:
        key = (e["type"], e.get("output_index"), (e.get("item") or {}).get("type"))
        if e["type"].endswith(".delta") and out and out[-1] == key:
            continue
        out.append(key)
    return out


def test_websocket_turn_streams_the_same_events_as_sse(graph_url):
    body = codex_turn("rsp-reason-call: list files", reasoning={"summary": "auto"})
    sse = [payload for _, payload in raw_stream(graph_url, body)]
    with connect(ws_url(graph_url), additional_headers={"Authorization": "Bearer k"}) as ws:
        events = exchange(ws, create(body))
    assert shape(events) == shape(sse)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in done] == ["reasoning", "function_call"]
    assert json.loads(done[1]["arguments"]) == {"command": ["ls", "-a"]}
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"] == done and final["usage"]["input_tokens"] > 0


def test_prewarm_fills_the_prefix_cache_and_the_turn_continues_it(graph_url):
    """Codex's session start: `generate: false` with instructions, tools and developer items, then the turn names
    the pre-warm by previous_response_id and sends only the user item."""
    instructions = f"You are a coding agent, session {uuid.uuid4()}. " + "Follow the repository conventions. " * 40
    developer = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: none."}]}
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "rsp-hello"}]}
    common = {"model": "smollm2", "instructions": instructions, "tools": [SHELL_TOOL], "store": False}
    with connect(ws_url(graph_url)) as ws:
        warm = exchange(ws, create({**common, "input": [developer]}, generate=False))
        assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
        warmed = warm[-1]["response"]
        assert warmed["output"] == [] and warmed["usage"]["output_tokens"] == 0
        turn = exchange(ws, create({**common, "input": [user]}, previous_response_id=warmed["id"]))
    final = turn[-1]["response"]
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "Hello from responses."
    # The pre-warmed prompt (instructions, tools, developer item) came from the engine's prefix cache: every full
    # 16-token block of it but for its generation prompt's "assistant\n" (2 tokens), where the turn's user item
    # starts instead (the session id's tokens move that boundary from run to run).
    shared = warmed["usage"]["input_tokens"] - 2
    assert final["usage"]["input_tokens_details"]["cached_tokens"] >= shared // 16 * 16
    # A cold connection with another session's instructions reuses none of that.
    cold_instructions = f"You are a coding agent, session {uuid.uuid4()}. " + "Follow the repository conventions. " * 40
    with connect(ws_url(graph_url)) as ws:
        cold = exchange(ws, create({**common, "instructions": cold_instructions, "input": [developer, user]}))
    assert cold[-1]["response"]["usage"]["input_tokens_details"]["cached_tokens"] < 16


def test_previous_response_id_is_the_connections_own_when_not_stored(graph_url):
    body = codex_turn("rsp-shell: list files")
    with connect(ws_url(graph_url)) as ws:
        first = exchange(ws, create(body))[-1]["response"]
        (call,) = first["output"]
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "rsp-out: a.txt"}
        second = exchange(ws, create(body, input=[output], previous_response_id=first["id"]))
        assert second[-1]["response"]["output"][0]["content"][0]["text"] == "There are two files."
    with connect(ws_url(graph_url)) as ws:  # another connection: `store: false` responses are not there
        missing = exchange(ws, create(body, input=[output], previous_response_id=first["id"]))
    assert [e["type"] for e in missing] == ["error"]
    assert missing[0]["status"] == 404 and missing[0]["error"]["code"] == "response_not_found"


def test_bad_frames_get_error_frames_and_the_connection_stays_usable(graph_url):
    with connect(ws_url(graph_url)) as ws:
        ws.send("{not json")
        bad = json.loads(ws.recv(timeout=30))
        assert bad["type"] == "error" and bad["status"] == 400
        assert bad["error"]["type"] == "invalid_request_error" and "JSON" in bad["error"]["message"]
        unknown = exchange(ws, {"type": "response.append", "input": []})
        assert unknown[0]["status"] == 400 and "type" in unknown[0]["error"]["message"]
        over = exchange(ws, create(codex_turn("rsp-hello " + "word " * 140_000)))  # Codex compacts on this code
        assert over[-1]["type"] == "response.failed"
        assert over[-1]["response"]["error"]["code"] == "context_length_exceeded"
        ok = exchange(ws, create(codex_turn("rsp-hello")))
        assert ok[-1]["type"] == "response.completed"
        # Newer Codex acknowledges a response with `response.processed`, expecting no answer.
        ws.send(json.dumps({"type": "response.processed", "response_id": ok[-1]["response"]["id"]}))
        after = exchange(ws, create(codex_turn("rsp-hello")))
        assert after[0]["type"] == "response.created" and after[-1]["type"] == "response.completed"


def test_keepalive_frames_fill_gaps_outside_the_numbered_events(graph_url):
    """Codex's idle timeout restarts on any text frame (not on pings): gaps longer than keepalive_interval_s (0.1 s
    in this graph; the AS_KEEPALIVE rule writes a token every 150 ms) get a frame every client ignores."""
    keepalives: list = []
    with connect(ws_url(graph_url)) as ws:
        events = exchange(ws, create({"model": "smollm2", "input": "AS_KEEPALIVE", "store": False}), keepalives)
    assert keepalives and events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_client_leaving_mid_response_ends_the_request(graph_url):
    with connect(ws_url(graph_url)) as ws:
        ws.send(json.dumps(create({"model": "smollm2", "input": "slow please", "store": False})))  # ~10 s of ticks
        while json.loads(ws.recv(timeout=30))["type"] != "response.output_text.delta":
            pass  # (keep-alive frames included)
        assert engine_active("agentserve") == 1
    # The connection is gone: the engine request is aborted and its lease released long before its 10 s end.
    wait_for(lambda: engine_active("agentserve") == 0 and router_stats("agentserve").in_flight == 0, timeout=5)


def test_input_tokens_counts_what_create_prefills(client):
    body = {
        "model": "smollm2",
        "instructions": "You are a coding agent.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: none."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "rsp-hello"}]},
        ],
        "tools": [SHELL_TOOL, PATCH_TOOL, MCP_NAMESPACE],
    }
    counted = client.responses.input_tokens.count(**body)
    assert counted.object == "response.input_tokens"
    created = client.responses.create(**body, store=False)
    assert counted.input_tokens == created.usage.input_tokens
    without_tools = client.responses.input_tokens.count(**{**body, "tools": []})
    assert without_tools.input_tokens < counted.input_tokens  # tools are in the count
    defaulted = httpx.post(str(client.base_url) + "responses/input_tokens", json={"input": "rsp-hello"}, timeout=30)
    assert defaulted.status_code == 200 and defaulted.json()["input_tokens"] > 0  # `model` may be omitted


def _session(body: dict) -> dict:
    return {**body, "prompt_cache_key": f"session-{uuid.uuid4()}"}


def test_namespaced_tool_call_round_trips_exactly(client):
    body = _session({"model": "smollm2", "input": [{"role": "user", "content": "rsp-mcp find the docs"}],
                     "tools": [MCP_NAMESPACE], "store": False})  # fmt: skip
    first = client.responses.create(**body)
    (call,) = first.output
    assert call.type == "function_call" and call.namespace == "mcp__docs__" and call.name == "search"
    assert json.loads(call.arguments) == {"query": "ray serve"}
    echoed = {"type": "function_call", "call_id": call.call_id, "namespace": call.namespace, "name": call.name,
              "arguments": call.arguments}  # fmt: skip
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "rsp-out: 3 hits"}
    raw = client.responses.with_raw_response.create(**{**body, "input": body["input"] + [echoed, result]})
    assert raw.parse().output_text == "There are two files."
    # The call came back as the model wrote it: turn 2's prompt is turn 1's prompt + turn 1's output, unchanged.
    assert raw.headers["x-agentserve-prefix"].startswith("reuse=1.0000"), raw.headers["x-agentserve-prefix"]


def test_custom_tool_input_round_trips_exactly(client):
    body = _session({"model": "smollm2", "input": [{"role": "user", "content": "rsp-patch please"}],
                     "tools": [PATCH_TOOL], "store": False})  # fmt: skip
    first = client.responses.create(**body)
    (call,) = first.output
    assert call.type == "custom_tool_call" and call.input == PATCH  # freeform text, not JSON
    echoed = {"type": "custom_tool_call", "call_id": call.call_id, "name": call.name, "input": call.input}
    result = {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "rsp-out: Done"}
    raw = client.responses.with_raw_response.create(**{**body, "input": body["input"] + [echoed, result]})
    assert raw.parse().output_text == "There are two files."
    assert raw.headers["x-agentserve-prefix"].startswith("reuse=1.0000"), raw.headers["x-agentserve-prefix"]


@pytest.mark.parametrize("method", ["HEAD", "GET"])
def test_root_probe_answers_at_once_without_saying_anything(graph_url, method):
    started = time.perf_counter()
    resp = httpx.request(method, graph_url + "/", timeout=10)
    assert resp.status_code == 200 and time.perf_counter() - started < 3
    if method == "GET":
        assert resp.json() == {"status": "ok"}
