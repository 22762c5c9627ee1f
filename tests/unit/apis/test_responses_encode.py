"""Responses encoder: event order, sequence numbers, ids that agree, sealed reasoning, terminal states."""

from __future__ import annotations

import json

from agentserve.apis.origin import origin_after
from agentserve.apis.responses import ResponsesEncoder, ResponsesRequest, Sealer
from agentserve.protocol.events import (
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    Usage,
)
from tests.support.keys import signing_key

SEALER = Sealer(signing_key("unit"))
ORIGIN = origin_after("caller", ())


def _encoder(body: dict, kinds=None) -> ResponsesEncoder:
    return ResponsesEncoder(
        response_id="resp_1",
        request=ResponsesRequest.model_validate({"model": "m", "input": "x", **body}),
        model_name="m",
        model_id="canonical",
        tool_kinds=kinds or {},
        sealer=SEALER,
        origin=ORIGIN,
        count_tokens=lambda s: len(s.split()),
    )


def _events(enc: ResponsesEncoder, evs: list) -> list[dict]:
    out = []
    for chunk in enc.start() + enc.encode(evs):
        head, data = chunk.decode().strip().split("\n")
        payload = json.loads(data[len("data: ") :])
        assert head == f"event: {payload['type']}"
        out.append(payload)
    assert [p["sequence_number"] for p in out] == list(range(len(out)))
    return out


def test_reasoning_call_text_in_one_stream():
    enc = _encoder({"reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"]})
    evs = _events(
        enc,
        [
            ReasoningDelta("think "),
            ReasoningDelta("hard"),
            ToolCallStart(0, "call_1", "f"),
            ToolCallArgsDelta(0, '{"a":'),
            ToolCallArgsDelta(0, "1}"),
            ToolCallEnd(0, '{"a":1}'),
            TextDelta("\n"),  # whitespace between items is not a message
            TextDelta("ok"),
            Usage(10, 5, 4),
            Finish("stop"),
        ],
    )
    types = [e["type"] for e in evs]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = evs[-1]["response"]
    rs, fc, msg = final["output"]
    assert SEALER.open(rs["encrypted_content"], ORIGIN).text == "think hard"
    assert SEALER.open(rs["encrypted_content"], ORIGIN).model == "canonical"
    assert fc["arguments"] == '{"a":1}' and fc["call_id"] == "call_1"
    assert msg["content"][0]["text"] == "\nok"
    done_ids = [e["item"]["id"] for e in evs if e["type"] == "response.output_item.done"]
    assert done_ids == [rs["id"], fc["id"], msg["id"]]
    assert final["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 15,
    }


def test_encrypted_content_only_when_included_but_always_kept_for_the_store():
    enc = _encoder({})
    body = enc.response([ReasoningDelta("r"), Usage(1, 1, 0), Finish("stop")])
    assert "encrypted_content" not in body["output"][0]
    assert body["output"][0]["content"] == [{"type": "reasoning_text", "text": "r"}]
    assert SEALER.open(enc.items[0]["encrypted_content"], ORIGIN).text == "r"


def test_custom_and_error_calls():
    enc = _encoder({}, kinds={"apply_patch": "custom"})
    evs = _events(
        enc,
        [
            ToolCallStart(0, "c0", "apply_patch"),
            ToolCallArgsDelta(0, '{"input": "*** Begin"}'),
            ToolCallEnd(0, '{"input": "*** Begin"}'),
            ToolCallStart(1, "c1", "f"),
            ToolCallArgsDelta(1, '{"a": '),
            ToolCallError(1, "bad json", '<tool_call>{"name": "f", "arguments": {"a": ]'),
            Usage(1, 1, 0),
            Finish("stop"),
        ],
    )
    types = [e["type"] for e in evs]
    assert "response.custom_tool_call_input.delta" in types and "response.custom_tool_call_input.done" in types
    custom, broken = evs[-1]["response"]["output"]
    assert custom["type"] == "custom_tool_call" and custom["input"] == "*** Begin"
    assert broken["status"] == "incomplete"


def test_length_and_error_terminals():
    enc = _encoder({"max_output_tokens": 3})
    body = enc.response([TextDelta("a b c"), Usage(1, 3, 0), Finish("length")])
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    enc = _encoder({})
    body = enc.response([Usage(1, 0, 0), Finish("error", "engine died")])
    assert body["status"] == "failed" and body["error"] == {"code": "server_error", "message": "engine died"}


def test_echoed_fields():
    enc = _encoder(
        {
            "instructions": "i",
            "parallel_tool_calls": False,
            "store": False,
            "tool_choice": "auto",
            "truncation": "auto",
            "text": {"format": {"type": "text"}, "verbosity": "low"},
            "metadata": {"a": "b"},
            "service_tier": "flex",
            "prompt_cache_key": "pk",
        }
    )
    body = enc.response_body()
    assert (body["instructions"], body["parallel_tool_calls"], body["store"], body["truncation"]) == ("i", False, False, "auto")
    assert body["text"]["verbosity"] == "low" and body["metadata"] == {"a": "b"}
    assert body["service_tier"] == "flex" and body["prompt_cache_key"] == "pk"
