"""`thinking.display: "omitted"`: blocks go out with empty text and a signature that carries it; the replayed block
(empty text) renders the model's real reasoning, for this caller at this place only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentserve.apis import anthropic
from agentserve.apis.anthropic import errors as anthropic_errors
from agentserve.apis.anthropic.encode import MessageEncoder
from agentserve.apis.origin import origin_after
from agentserve.ingress.middleware.auth import hash_key
from agentserve.protocol import ReasoningBlock, TextBlock, Turn
from agentserve.protocol.errors import RequestError
from agentserve.protocol.events import Finish, ReasoningDelta, TextDelta, ToolCallEnd, ToolCallStart, Usage
from tests.support.keys import signing_key

SIGNER = anthropic.ThinkingSigner(signing_key("unit"))
CALLER = hash_key("client key")
USER = {"role": "user", "content": "What is 2+2?"}
ORIGIN = origin_after(CALLER, (Turn(role="user", blocks=(TextBlock(text="What is 2+2?"),)),))


def _encode(omit: bool, events):
    enc = MessageEncoder(message_id="msg_1", model="m", prompt_tokens=10, signer=SIGNER, origin=ORIGIN,
                         omit_thinking_text=omit)
    return enc, enc.frames(events)


def _decode(messages, signer=SIGNER, caller=CALLER, thinking=None):
    body = {"model": "m", "max_tokens": 4096, "messages": messages}
    if thinking:
        body["thinking"] = thinking
    req = anthropic.MessagesRequest.model_validate(body)
    return anthropic.decode(req, request_id="r", model="m", signer=signer, caller=caller)


EVENTS = [ReasoningDelta("Two plus "), ReasoningDelta("two is four."), TextDelta("4"),
          ToolCallStart(0, "toolu_a", "f"), ToolCallEnd(0, "{}"), Usage(10, 9, 0), Finish("stop")]


def test_the_stream_has_no_thinking_delta_and_a_signature_delta_before_the_stop():
    enc, frames = _encode(True, EVENTS)
    thinking = [(n, d) for n, d in frames if d.get("index") == 0]
    assert [n for n, _ in thinking] == ["content_block_start", "content_block_delta", "content_block_stop"]
    assert thinking[0][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert thinking[1][1]["delta"]["type"] == "signature_delta"
    assert not any(d.get("delta", {}).get("type") == "thinking_delta" for _, d in frames)
    block = enc.message()["content"][0]
    assert block["thinking"] == "" and block["signature"] == thinking[1][1]["delta"]["signature"]
    assert [b["type"] for b in enc.message()["content"]] == ["thinking", "text", "tool_use"]
    shown, _ = _encode(False, EVENTS)  # the default still streams the text
    assert shown.message()["content"][0]["thinking"] == "Two plus two is four."


def test_the_replayed_block_renders_the_real_reasoning():
    enc, _ = _encode(True, EVENTS)
    reply = {"role": "assistant", "content": enc.message()["content"]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "ok"}]}
    gen = _decode([USER, reply, result], thinking={"type": "adaptive", "display": "omitted"})
    reasoning = [b for t in gen.conversation.turns for b in t.blocks if isinstance(b, ReasoningBlock)]
    assert [b.text for b in reasoning] == ["Two plus two is four."]
    # sent back with the text filled in (a client that kept it some other way) it is the same block
    filled = {**reply, "content": [{**reply["content"][0], "thinking": "Two plus two is four."}, *reply["content"][1:]]}
    assert _decode([USER, filled, result]).conversation == gen.conversation


@pytest.mark.parametrize("change", ["other text", "caller", "place", "key", "tampered"])
def test_a_sealed_signature_holds_only_for_its_block_caller_place_and_key(change):
    enc, _ = _encode(True, EVENTS)
    block = dict(enc.message()["content"][0])
    messages, signer, caller = [USER, {"role": "assistant", "content": [block]}], SIGNER, CALLER
    if change == "other text":
        block["thinking"] = "Two plus two is five."
    elif change == "caller":
        caller = hash_key("another key")
    elif change == "place":
        messages = [{"role": "user", "content": "What is 3+3?"}, messages[1]]
    elif change == "key":
        signer = anthropic.ThinkingSigner(signing_key("other"))
    else:
        block["signature"] = block["signature"][:-4] + ("AAAA" if not block["signature"].endswith("AAAA") else "BBBB")
    with pytest.raises(RequestError) as exc:
        _decode(messages, signer=signer, caller=caller)
    assert exc.value.kind == "invalid_request" and "Invalid `signature`" in exc.value.message
    assert anthropic_errors.status(exc.value) == 400


def test_an_hmac_signature_does_not_stand_for_omitted_text():
    sig = SIGNER.sign("Two plus two is four.", ORIGIN)
    assert SIGNER.reasoning("Two plus two is four.", sig, ORIGIN) == "Two plus two is four."
    assert SIGNER.reasoning("", sig, ORIGIN) is None


def test_display_values():
    assert anthropic.thinking_omitted(anthropic.MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 9, "messages": [USER], "thinking": {"type": "enabled", "budget_tokens": 1024,
                                                                          "display": "omitted"}}))
    def omitted(thinking: dict) -> bool:
        return anthropic.thinking_omitted(anthropic.MessagesRequest.model_validate(
            {"model": "m", "max_tokens": 9, "messages": [USER], "thinking": thinking}))

    assert not omitted({"type": "adaptive"}) and not omitted({"type": "adaptive", "display": "summarized"})
    # Claude Code 2.1.332 sends "updates" (only the text between tool calls shown): the reasoning is hidden too
    assert omitted({"type": "adaptive", "display": "updates"})
    assert not omitted({"type": "adaptive", "display": "a-future-mode"})  # served, shown: never a 400
    with pytest.raises(ValidationError):
        omitted({"type": "adaptive", "display": 3})


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_any_reasoning_round_trips_through_its_sealed_signature(text):
    sig = SIGNER.seal(text, ORIGIN)
    assert SIGNER.reasoning("", sig, ORIGIN) == text
    assert SIGNER.reasoning(text, sig, ORIGIN) == text
