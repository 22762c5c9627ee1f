"""Anthropic request decoding: block order, system placement, tool results, signatures, and malformed bodies."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentserve.apis import anthropic
from agentserve.apis.anthropic import errors as anthropic_errors
from agentserve.protocol import ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock
from agentserve.apis.origin import Origins, origin_after
from agentserve.ingress.middleware.auth import hash_key
from agentserve.protocol.errors import RequestError
from tests.support.keys import signing_key

SIGNER = anthropic.ThinkingSigner(signing_key("unit"))
CALLER = hash_key("client key")


def decode(body: dict):
    req = anthropic.MessagesRequest.model_validate({"model": "m", "max_tokens": 4096, **body})
    return anthropic.decode(req, request_id="r", model="m", signer=SIGNER, caller=CALLER)


def test_interleaved_assistant_blocks_keep_their_order():
    gen = decode({"messages": anthropic.sign_thinking([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "first", "signature": ""},
            {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {"x": 1}},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "thinking", "thinking": "second", "signature": ""},
            {"type": "tool_use", "id": "toolu_2", "name": "b", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "EN"}, {"type": "text", "text": "OENT"}]},
        ]},
    ], SIGNER, caller=CALLER)})
    blocks = gen.conversation.turns[1].blocks
    assert [type(b) for b in blocks] == [ReasoningBlock, ToolCallBlock, ReasoningBlock, ToolCallBlock]
    assert json.loads(blocks[1].arguments) == {"x": 1}
    results = gen.conversation.turns[2].blocks
    assert results == (ToolResultBlock(tool_call_id="toolu_1", content="ok"),
                       ToolResultBlock(tool_call_id="toolu_2", content="EN\nOENT", is_error=True))


def test_system_forms_mid_conversation_system_and_text_runs():
    gen = decode({
        "system": [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral", "ttl": "1h", "scope": "x"}},
                   {"type": "text", "text": "B"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "<system-reminder>r</system-reminder>"},
                                         {"type": "text", "text": "hi"}]},
            {"role": "system", "content": "env"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "u"},
                                         {"type": "mid_conv_system", "content": [{"type": "text", "text": "s"}]}]},
        ],
        "context_management": {"edits": []}, "output_config": {"effort": "high"}, "service_tier": "auto",
    })
    assert [(t.role, t.text()) for t in gen.conversation.turns] == [
        ("system", "A\nB"), ("user", "<system-reminder>r</system-reminder>\nhi"), ("system", "env"),
        ("assistant", "ok"), ("user", "u"), ("system", "s")]
    assert decode({"system": "plain", "messages": [{"role": "user", "content": "x"}]}).conversation.turns[0].text() == "plain"


def test_sampling_tools_and_choices():
    tool = {"name": "t", "input_schema": {"type": "object"}, "strict": True, "defer_loading": False}
    gen = decode({"messages": [{"role": "user", "content": "x"}], "tools": [tool, {"type": "web_search_20250305",
                                                                                    "name": "web_search"}],
                  "tool_choice": {"type": "any"}, "stop_sequences": ["END"], "temperature": 0, "top_k": 5,
                  "thinking": {"type": "disabled"}, "metadata": {"user_id": "{\"a\": 1}"}})
    assert [t.name for t in gen.conversation.tools] == ["t"] and gen.conversation.tool_choice == "required"
    assert gen.sampling.stop == ("END",) and gen.sampling.temperature == 0 and gen.sampling.top_k == 5
    assert gen.thinking is False and gen.hints.session_id == "{\"a\": 1}"
    assert decode({"messages": [{"role": "user", "content": "x"}], "tools": [tool],
                   "tool_choice": {"type": "tool", "name": "t"}}).conversation.tool_choice.name == "t"
    assert decode({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "adaptive"}}).thinking is True


@pytest.mark.parametrize("body, fragment", [
    ({"messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": "x", "signature": "bad"}]}]},
     "signature"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "any"}}, "at least one tool"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "t"}]}, "input_schema"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}]}]},
     "cannot contain"),
    ({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 100}},
     "1024"),
    ({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 5000}},
     "max_tokens"),
])
def test_semantic_errors_are_invalid_request(body, fragment):
    with pytest.raises(RequestError) as exc:
        decode(body)
    assert exc.value.kind == "invalid_request" and fragment in exc.value.message


def test_a_model_that_does_not_reason_refuses_a_thinking_budget_and_serves_adaptive():
    """`enabled` with a budget cannot be honoured without reasoning: a 400 naming `thinking`, not a silent answer
    without it; `adaptive` (what Claude Code sends a model it does not know) leaves it to the model: served."""
    def on_plain_model(thinking: dict):
        req = anthropic.MessagesRequest.model_validate(
            {"model": "m", "max_tokens": 4096, "messages": [{"role": "user", "content": "x"}], "thinking": thinking,
             "output_config": {"effort": "high"}})
        return anthropic.decode(req, request_id="r", model="m", signer=SIGNER, caller=CALLER, reasons=False)

    with pytest.raises(RequestError) as exc:
        on_plain_model({"type": "enabled", "budget_tokens": 2048})
    assert exc.value.param == "thinking" and "does not reason" in exc.value.message
    assert anthropic_errors.status(exc.value) == 400
    adaptive = on_plain_model({"type": "adaptive"})
    assert adaptive.thinking is True and adaptive.reasoning_effort == "high"
    assert on_plain_model({"type": "disabled"}).thinking is False


VALID = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
        ["type", "text", "role", "content", "id", "name", "input", "thinking", "signature", "tool_use_id",
         "is_error", "source", "data", "budget_tokens", "cache_control", "x"]), inner, max_size=4)), max_leaves=12)
KEYS = ["model", "max_tokens", "messages", "system", "tools", "tool_choice", "thinking", "stop_sequences",
        "temperature", "top_p", "top_k", "stream", "metadata"]
BLOCK_TYPES = ["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "document",
               "mid_conv_system", "server_tool_use", "bogus"]


@st.composite
def malformed_bodies(draw):
    body = json.loads(json.dumps(VALID))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["set", "drop", "block", "message"]))
        key = draw(st.sampled_from(KEYS))
        if action == "set":
            body[key] = draw(json_value)
        elif action == "drop":
            body.pop(key, None)
        elif action == "block":
            block = draw(st.dictionaries(st.sampled_from(["text", "id", "name", "input", "content", "thinking",
                                                          "signature", "tool_use_id", "source", "data"]),
                                         json_value, max_size=4))
            block["type"] = draw(st.sampled_from(BLOCK_TYPES))
            body["messages"] = [{"role": draw(st.sampled_from(["user", "assistant", "system", "tool"])),
                                 "content": [block]}]
        else:
            body["messages"] = draw(json_value)
    return body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(malformed_bodies())
def test_malformed_bodies_never_escape_as_server_errors(body):
    """Every body is either decoded or refused with a 4xx in Anthropic's envelope."""
    try:
        req = anthropic.MessagesRequest.model_validate(body)
        origins = Origins(CALLER)
        gen = anthropic.decode(req, request_id="r", model="m", signer=SIGNER, caller=CALLER, origins=origins)
        # the reply's position, walked along the decode, is the one a fresh walk over the decoded turns names
        assert origins.after(gen.conversation.turns) == origin_after(CALLER, gen.conversation.turns)
    except ValidationError:
        return  # the HTTP layer turns this into 400 invalid_request_error
    except RequestError as err:
        status, kind = anthropic_errors.status_and_type(err)
        assert 400 <= status < 500 and kind == "invalid_request_error"
        envelope = anthropic_errors.error_body(err, "req_1")
        assert envelope == {"type": "error", "error": {"type": kind, "message": err.message}, "request_id": "req_1"}


def test_envelope_statuses():
    cases = {"invalid_request": (400, "invalid_request_error"), "authentication": (401, "authentication_error"),
             "not_found": (404, "not_found_error"), "too_large": (413, "request_too_large"),
             "rate_limit": (429, "rate_limit_error"), "internal": (500, "api_error"),
             "overloaded": (529, "overloaded_error")}
    for kind, expected in cases.items():
        assert anthropic_errors.status_and_type(RequestError(kind, "m")) == expected
    assert anthropic_errors.prompt_too_long(9000, 8192).message == "prompt is too long: 9000 tokens > 8192 maximum"


def test_signatures_verify_only_the_signed_text():
    origin = origin_after(CALLER, ())
    sig = SIGNER.sign("thought", origin)
    assert SIGNER.verify("thought", sig, origin) and not SIGNER.verify("thought!", sig, origin)
    assert not anthropic.ThinkingSigner(signing_key("other")).verify("thought", sig, origin)
    assert TextBlock(text="x")  # keeps the import used
