"""Responses API streaming events through the real graph, with the official openai SDK and raw SSE."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.integration.conftest import sse_events
from tests.integration.responses_rules import PATCH

pytestmark = pytest.mark.integration

SHELL_TOOL = {
    "type": "function",
    "name": "shell",
    "description": "Run a command",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
        "required": ["command"],
    },
}
PATCH_TOOL = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"},
}


@pytest.fixture(scope="module")
def client(graph_url):
    return openai.OpenAI(base_url=f"{graph_url}/v1", api_key="test-key")


def raw_stream(graph_url: str, body: dict, **kwargs) -> list[tuple[str, dict]]:
    with httpx.stream("POST", f"{graph_url}/v1/responses", json={**body, "stream": True}, timeout=60, **kwargs) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.iter_lines())
    out = []
    for name, data in events:
        assert data != "[DONE]"
        payload = json.loads(data)
        assert name == payload["type"]  # `event:` equals data.type
        out.append((name, payload))
    assert [p["sequence_number"] for _, p in out] == list(range(len(out)))
    return out


def codex_turn(text: str, **extra) -> dict:
    """A request in the shape Codex sends (F9): developer + user messages, no ids, store false."""
    return {
        "model": "smollm2",
        "instructions": "You are a coding agent.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: none."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        ],
        "tools": [SHELL_TOOL],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "store": False,
        "include": [],
        "prompt_cache_key": "3f0c2d7e-codex-session",
        **extra,
    }


def test_function_call_events_in_order(graph_url):
    events = raw_stream(graph_url, codex_turn("rsp-shell: list files"))
    types = [t for t, _ in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert types[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(types[3:-3]) == {"response.function_call_arguments.delta"}
    added = events[2][1]["item"]
    assert added["type"] == "function_call" and added["arguments"] == "" and added["name"] == "shell"
    deltas = "".join(p["delta"] for t, p in events if t == "response.function_call_arguments.delta")
    done_item = events[-2][1]["item"]
    assert json.loads(deltas) == json.loads(done_item["arguments"]) == {"command": ["ls"]}
    assert done_item["id"] == added["id"] and done_item["call_id"] == added["call_id"]
    assert done_item["call_id"].startswith("call_") and done_item["status"] == "completed"
    final = events[-1][1]["response"]
    assert final["status"] == "completed" and final["output"] == [done_item]
    usage = final["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] >= 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0
    assert final["store"] is False and final["parallel_tool_calls"] is False
    assert final["prompt_cache_key"] == "3f0c2d7e-codex-session"


def test_reasoning_summary_then_call_with_sdk_stream(client):
    with client.responses.stream(
        model="smollm2",
        input="rsp-reason-call",
        tools=[SHELL_TOOL],
        reasoning={"effort": "medium", "summary": "auto"},
        include=["reasoning.encrypted_content"],
        store=False,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types.index("response.reasoning_summary_part.added") < types.index(
        "response.reasoning_summary_text.delta"
    ) < types.index("response.reasoning_summary_text.done") < types.index("response.reasoning_summary_part.done")
    assert types.index("response.reasoning_summary_part.done") < types.index("response.function_call_arguments.delta")
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert summary == "The user wants files; I will list them."
    reasoning, call = final.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == summary
    assert reasoning.encrypted_content
    assert call.type == "function_call" and json.loads(call.arguments) == {"command": ["ls", "-a"]}
    assert final.usage.output_tokens_details.reasoning_tokens > 0
    streamed_ids = [e.item.id for e in events if e.type == "response.output_item.done"]
    assert streamed_ids == [item.id for item in final.output]


def test_raw_reasoning_text_and_message_events(graph_url):
    events = raw_stream(graph_url, {"model": "smollm2", "input": "rsp-reason-text"})
    types = [t for t, _ in events]
    expected_order = [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deduped = [t for i, t in enumerate(types[2:]) if i == 0 or t != types[2:][i - 1]]
    assert deduped == expected_order
    reasoning = "".join(p["delta"] for t, p in events if t == "response.reasoning_text.delta")
    text = "".join(p["delta"] for t, p in events if t == "response.output_text.delta")
    assert (reasoning, text) == ("Two plus two is four.", "It is 4.")
    assert all(p["content_index"] == 0 for t, p in events if t.endswith("text.delta"))
    final = events[-1][1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]
    assert "encrypted_content" not in final["output"][0]  # not included unless asked for
    assert final["output"][1]["content"][0]["text"] == "It is 4."


def test_non_streaming_message(client):
    resp = client.responses.create(model="smollm2", input="rsp-hello", metadata={"k": "v"}, service_tier="auto")
    assert resp.status == "completed" and resp.output_text == "Hello from responses."
    assert resp.id.startswith("resp_") and resp.output[0].id.startswith("msg_")
    assert resp.metadata == {"k": "v"} and resp.service_tier == "auto"


def test_custom_tool_call_and_its_output(client):
    with client.responses.stream(model="smollm2", input="rsp-patch please", tools=[PATCH_TOOL]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert "response.custom_tool_call_input.delta" in types and "response.custom_tool_call_input.done" in types
    (call,) = final.output
    assert call.type == "custom_tool_call" and call.name == "apply_patch" and call.input == PATCH
    follow = client.responses.create(
        model="smollm2",
        input=[
            {"role": "user", "content": "rsp-patch please"},
            {"type": "custom_tool_call", "call_id": call.call_id, "name": "apply_patch", "input": call.input},
            {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "rsp-out: Done"},
        ],
        tools=[PATCH_TOOL],
    )
    assert follow.output_text == "There are two files."


def test_local_shell_call(client):
    resp = client.responses.create(model="smollm2", input="rsp-local-shell", tools=[{"type": "local_shell"}])
    (call,) = resp.output
    assert call.type == "local_shell_call" and call.action.command == ["echo", "hi"]


def test_malformed_call_is_closed_incomplete(graph_url):
    events = raw_stream(graph_url, codex_turn("rsp-broken"))
    done = [p["item"] for t, p in events if t == "response.output_item.done"]
    assert done and done[0]["type"] == "function_call" and done[0]["status"] == "incomplete"
    assert events[-1][0] == "response.completed"


def test_max_output_tokens_is_incomplete(client, graph_url):
    events = raw_stream(graph_url, {"model": "smollm2", "input": "slow please", "max_output_tokens": 5})
    assert events[-1][0] == "response.incomplete"
    final = events[-1][1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["output_tokens"] == 5


def test_context_length_exceeded(client):
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model="smollm2", input="word " * 9000)
    assert exc.value.body["code"] == "context_length_exceeded"
    assert exc.value.body["type"] == "invalid_request_error"


def test_context_length_exceeded_streams_response_failed(graph_url):
    events = raw_stream(graph_url, {"model": "smollm2", "input": "word " * 9000})
    assert [t for t, _ in events] == ["response.created", "response.in_progress", "response.failed"]
    failed = events[-1][1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "context_length_exceeded"
