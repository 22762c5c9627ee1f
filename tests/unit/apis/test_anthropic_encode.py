"""Anthropic encoder and stream pump without Ray: block machine, usage, stop reasons, pings, error frames."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from agentserve.apis import anthropic
from agentserve.apis.anthropic.encode import MessageEncoder
from agentserve.protocol.errors import RequestError
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
from agentserve.ingress.handlers.anthropic_messages import AnthropicMessagesHandler
from agentserve.apis.origin import origin_after
from tests.support.keys import signing_key

SIGNER = anthropic.ThinkingSigner(signing_key("unit"))
ORIGIN = origin_after("caller", ())


def encoder(**kw) -> MessageEncoder:
    return MessageEncoder(message_id="msg_1", model="m", prompt_tokens=100, signer=SIGNER, origin=ORIGIN, **kw)


CALL = [ToolCallStart(0, "toolu_a", "f"), ToolCallArgsDelta(0, '{"a"'), ToolCallArgsDelta(0, ": 1}"),
        ToolCallEnd(0, '{"a": 1}')]


def test_blocks_signature_usage_and_dispatch():
    enc = encoder(tool_dispatch=True)
    frames = enc.frames([ReasoningDelta("think"), TextDelta("hi"), *CALL, Usage(100, 7, 64), Finish("stop")])
    names = [n for n, _ in frames]
    assert names == ["content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop", "tool_call_dispatch",
                     "message_delta", "message_stop"]
    assert frames[2][1]["delta"] == {"type": "signature_delta", "signature": SIGNER.sign("think", ORIGIN)}
    assert frames[8][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"a": 1}'}  # buffered, whole
    assert frames[10][1] == {"type": "tool_call_dispatch", "index": 2,
                             "tool_use": {"id": "toolu_a", "name": "f", "input": {"a": 1}}}
    delta = frames[11][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"] == {"input_tokens": 36, "cache_creation_input_tokens": 0,
                              "cache_read_input_tokens": 64, "output_tokens": 7}
    msg = enc.message()
    assert [b["type"] for b in msg["content"]] == ["thinking", "text", "tool_use"]
    assert msg["usage"]["input_tokens"] + msg["usage"]["cache_read_input_tokens"] == 100
    start = enc.start_frame()[1]["message"]
    assert start["usage"]["input_tokens"] == 100 and start["usage"]["cache_read_input_tokens"] == 0


def test_live_args_when_fine_grained_and_errored_calls():
    enc = encoder(live_tool_args=True)
    frames = enc.frames(CALL)
    assert [d["delta"]["partial_json"] for n, d in frames if n == "content_block_delta"] == ['{"a"', ": 1}"]
    buffered = encoder()
    out = buffered.frames([ToolCallStart(0, "toolu_b", "f"), ToolCallArgsDelta(0, "{"),
                           ToolCallError(0, "bad json", "{"), TextDelta("Sorry."), Usage(100, 3, 0),
                           Finish("stop")])
    assert [d["content_block"]["type"] for n, d in out if n == "content_block_start"] == ["text"]
    assert buffered.stop_reason() == "end_turn"


def test_parallel_off_keeps_the_first_call_and_stop_reasons():
    enc = encoder(parallel_tool_use=False)
    second = [ToolCallStart(1, "toolu_c", "g"), ToolCallEnd(1, "{}")]
    enc.frames([*CALL, *second, Usage(100, 9, 0), Finish("stop")])
    assert [b["id"] for b in enc.message()["content"]] == ["toolu_a"]
    e2 = encoder()
    e2.frames([TextDelta("a "), Usage(100, 3, 0), Finish("stop", None, "END")])
    assert e2.message()["stop_reason"] == "stop_sequence" and e2.message()["stop_sequence"] == "END"
    e3 = encoder()
    e3.frames([TextDelta("a"), Usage(100, 3, 0), Finish("length")])
    assert e3.stop_reason() == "max_tokens"
    e4 = encoder()
    frames = e4.frames([TextDelta("a"), Finish("error", "boom")])
    assert frames[-1] == ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "boom"}})


def _handler(interval: float) -> AnthropicMessagesHandler:
    ctx = SimpleNamespace(args=SimpleNamespace(secret_key=signing_key("unit"), previous_secret_keys=(), keepalive_interval_s=interval,
                                          kept_turns=SimpleNamespace(conversation_memo_bytes=0)))
    return AnthropicMessagesHandler(ctx)  # type: ignore[arg-type]


def test_oversized_body_is_413_request_too_large():
    from agentserve.apis.anthropic import errors as anthropic_errors

    request = SimpleNamespace(headers={"content-length": str(33 * 1024 * 1024)})
    try:
        asyncio.run(_handler(1.0)._body(request, anthropic.MessagesRequest))
    except RequestError as err:
        assert anthropic_errors.status_and_type(err) == (413, "request_too_large")
    else:
        raise AssertionError("no error")


def test_final_usage_takes_the_engines_prompt_count():
    """A vision model's prompt: message_start knows the placeholders (100 tokens), the engine ran the images expanded
    (900, 500 of them cached); the final usage is the engine's, split without a negative or clamped figure."""
    enc = encoder()
    frames = enc.frames([TextDelta("ok"), Usage(900, 2, 500), Finish("stop")])
    usage = [d for n, d in frames if n == "message_delta"][0]["usage"]
    assert (usage["input_tokens"], usage["cache_read_input_tokens"]) == (400, 500)
    assert enc.start_frame()[1]["message"]["usage"]["input_tokens"] == 100
    unreported = encoder()  # the engine failed before its first delta: the Preprocessor's count stands
    unreported.frames([Usage(0, 0, 0), Finish("stop")])
    assert unreported.message()["usage"]["input_tokens"] == 100
