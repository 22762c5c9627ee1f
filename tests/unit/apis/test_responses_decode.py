"""Responses decoding: item order, replay of our own output items, tools, and malformed bodies (hypothesis)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentserve.apis.origin import origin_after
from agentserve.apis.responses import ResponsesRequest, Sealer, decode, seal_reasoning
from agentserve.apis.responses.sealing import SealedReasoning
from agentserve.protocol import NamedToolChoice, ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock, Turn
from agentserve.protocol.errors import RequestError
from tests.support.keys import signing_key

SEALER = Sealer(signing_key("unit"))
CALLER = "caller"


def _decode(body: dict, **kw):
    return decode(ResponsesRequest.model_validate(body), request_id="r", model="m", sealer=SEALER, caller=CALLER, **kw)


def test_interleaved_reasoning_and_calls_stay_in_order():
    sealed = seal_reasoning([
        {"role": "developer", "content": "dev"},
        {"role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "first"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":1}'},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "second thought"}]},
    ], SEALER, caller=CALLER, model="m")
    blob = sealed[-1]["encrypted_content"]
    d = _decode(
        {
            "model": "m",
            "instructions": "sys",
            "input": [
                *sealed[:4],
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "WRONG"}], "encrypted_content": blob},
                {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "one"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
                {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
            ],
        }
    )
    turns = d.request.conversation.turns
    assert [t.role for t in turns] == ["system", "system", "user", "assistant", "tool", "assistant"]
    assert turns[3].blocks == (
        ReasoningBlock(text="first"),
        ToolCallBlock(id="c1", name="f", arguments='{"a":1}'),
        ReasoningBlock(text="second thought"),
        ToolCallBlock(id="c2", name="f", arguments="{}"),
    )
    assert turns[4].blocks == (ToolResultBlock(tool_call_id="c1", content="one"), ToolResultBlock(tool_call_id="c2", content="two"))
    assert turns[5].blocks == (TextBlock(text="done"),)


def test_tools_kinds_and_choice():
    d = _decode(
        {
            "model": "m",
            "input": "x",
            "tools": [
                {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}},
                {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
                {"type": "local_shell"},
                {"type": "web_search"},
            ],
            "tool_choice": {"type": "custom", "name": "apply_patch"},
        }
    )
    assert d.tool_kinds == {"f": "function", "apply_patch": "custom", "local_shell": "local_shell"}
    conv = d.request.conversation
    assert [t.name for t in conv.tools] == ["f", "apply_patch", "local_shell"]
    assert "start: x" in conv.tools[1].description
    assert conv.tool_choice == NamedToolChoice(name="apply_patch")


def test_custom_tool_call_replays_as_json_input():
    d = _decode(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "x"},
                {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin Patch\nü"},
            ],
        }
    )
    (call,) = d.request.conversation.turns[1].blocks
    assert json.loads(call.arguments) == {"input": "*** Begin Patch\nü"}


def test_a_named_choice_of_the_wrong_kind_is_refused():
    """A custom tool forced as a function (or a function as a custom tool) is a 400 saying which kind it is."""
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}},
             {"type": "custom", "name": "apply_patch"}]
    for choice, kind in (({"type": "function", "name": "apply_patch"}, "custom"), ({"type": "custom", "name": "f"}, "function")):
        with pytest.raises(RequestError) as exc:
            _decode({"model": "m", "input": "x", "tools": tools, "tool_choice": choice})
        assert exc.value.status == 400 and exc.value.param == "tool_choice"
        assert f"declare '{choice['name']}' as a {kind} tool" in str(exc.value)


@pytest.mark.parametrize("cut", [0, 1, 5, 11, 14, 17, 20])
def test_a_custom_call_cut_off_gives_the_input_written_so_far(cut):
    """max_output_tokens inside a freeform call: `input` is the patch text so far, never the JSON wrapping it."""
    from agentserve.apis.responses.decode import custom_tool_arguments, custom_tool_input

    text = '*** Begin Patch\n+"é" \\ \u0001'
    full = custom_tool_arguments(text)
    assert custom_tool_input(full) == text
    partial = custom_tool_input(full[: len(full) - 2 - cut])  # without the closing quote and brace, then less
    assert text.startswith(partial) and len(text) - len(partial) <= cut + 1, partial
    assert custom_tool_input('{"other": "x') == '{"other": "x'


def test_sampling_and_session():
    d = _decode(
        {"model": "m", "input": "x", "max_output_tokens": 7, "temperature": 0.2, "prompt_cache_key": "k", "seed": 7},
        session_id=None,
    )
    assert d.request.sampling.max_tokens == 7 and d.request.sampling.temperature == 0.2
    assert d.request.sampling.seed == 7  # vLLM's Responses field: repeatable sampling
    assert _decode({"model": "m", "input": "x"}).request.sampling.seed is None
    assert d.request.hints.session_id == "k"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": [{"role": "user", "content": "x"}, {"type": "reasoning", "encrypted_content": "zz"}]}, "input[1].encrypted_content"),
        ({"model": "m", "input": "x", "tool_choice": "required"}, "tool_choice"),
        ({"model": "m", "input": "x", "background": True}, "background"),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input[0].content[0]"),
    ],
)
def test_invalid_requests_name_the_parameter(body, param):
    with pytest.raises(RequestError) as exc:
        _decode(body)
    assert exc.value.status == 400 and exc.value.param == param


def test_foreign_key_blob_is_rejected():
    origin = origin_after(CALLER, (Turn(role="user", blocks=(TextBlock(text="x"),)),))
    foreign = Sealer(signing_key("another deployment")).seal(SealedReasoning("t", "m", "resp_1", 0), origin)
    with pytest.raises(RequestError) as exc:
        _decode({"model": "m", "input": [{"role": "user", "content": "x"}, {"type": "reasoning", "summary": [], "encrypted_content": foreign}]})
    assert exc.value.code == "invalid_encrypted_content"


# -- random malformed bodies: either a validation error or a RequestError, never anything else ----------
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
_item_types = st.sampled_from(
    ["message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
     "reasoning", "local_shell_call", "local_shell_call_output", "item_reference", "bogus"]
)  # fmt: skip
_keys = st.sampled_from(
    ["role", "content", "call_id", "name", "arguments", "output", "input", "summary", "encrypted_content", "id", "action"]
)
_items = st.builds(lambda t, extra: {"type": t, **extra}, _item_types, st.dictionaries(_keys, _json, max_size=4))
_bodies = st.fixed_dictionaries(
    {"model": st.just("m")},
    optional={
        "input": st.one_of(st.text(max_size=5), st.lists(st.one_of(_items, _json), max_size=4)),
        "tools": st.lists(st.one_of(st.dictionaries(st.sampled_from(["type", "name", "format"]), _json), _json), max_size=2),
        "tool_choice": _json,
        "instructions": _json,
        "reasoning": _json,
        "max_output_tokens": _json,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bodies)
def test_decoder_on_random_bodies_fails_only_with_client_errors(body):
    try:
        req = ResponsesRequest.model_validate(body)
    except ValidationError:
        return
    try:
        d = decode(req, request_id="r", model="m", sealer=SEALER, caller=CALLER)
    except RequestError as err:
        assert err.status == 400
        return
    assert d.request.conversation.turns
    # the reply's position, walked along the decode, is the one a fresh walk over the decoded turns names
    assert d.origin == origin_after(CALLER, d.request.conversation.turns)
