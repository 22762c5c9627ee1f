"""The shared streaming client on streams recorded from the real graph (scripted engine; tests/unit/bench/streams/:
for each API a reply with reasoning, text and a tool call (`*_tool`), plain text (`*_plain`) and reasoning then text
(`*_think`), recorded with `httpx` from `running_graph`), and on hand-written error streams."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.bench import client as sse

STREAMS = Path(__file__).parent / "streams"

# per recording: the order of first events, text, reasoning, stop reason, output / prompt / cached tokens, blocks
EXPECTED = {
    "chat_tool": (["reasoning", "text", "tool", "finish"], "I will read it.", "Let me look.", "tool_calls", 49, 203, 0, []),
    "chat_plain": (["text", "finish"], "Hello there friend, this is the answer.", "", "stop", 10, 32, 16, []),
    "chat_think": (["reasoning", "text", "finish"], "Hello there friend.", "Short thought.", "stop", 14, 32, 16, []),
    "anthropic_tool": (["block_start", "reasoning", "text", "tool", "finish"], "I will read it.", "Let me look.",
                       "tool_use", 49, 203, 192, ["thinking", "text", "tool_use"]),
    "anthropic_plain": (["block_start", "text", "finish"], "Hello there friend, this is the answer.", "", "end_turn",
                        10, 32, 16, ["text"]),
    "anthropic_think": (["block_start", "reasoning", "text", "finish"], "Hello there friend.", "Short thought.",
                        "end_turn", 14, 32, 16, ["thinking", "text"]),
    "responses_tool": (["reasoning", "text", "tool", "finish"], "I will read it.", "Let me look.", "completed", 49, 203,
                       192, []),
    "responses_plain": (["text", "finish"], "Hello there friend, this is the answer.", "", "completed", 10, 32, 16, []),
    "responses_think": (["reasoning", "text", "finish"], "Hello there friend.", "Short thought.", "completed", 14, 32,
                        16, []),
}


def collect(name: str, chunks: list[bytes]) -> sse.StreamResult:
    c = sse.StreamCollector(name.split("_")[0])
    for i, chunk in enumerate(chunks):
        c.feed(chunk, float(i))
    return c.close(float(len(chunks)))


def by_line(name: str) -> list[bytes]:
    return (STREAMS / f"{name}.sse").read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_stream(name):
    order, text, reasoning, stop, out, prompt, cached, blocks = EXPECTED[name]
    r = collect(name, by_line(name))
    assert sorted(r.first, key=r.first.get) == order
    assert (r.text, r.reasoning, r.stop_reason) == (text, reasoning, stop)
    assert (r.output_tokens, r.prompt_tokens, r.cached_tokens) == (out, prompt, cached)
    assert [b.get("type") for b in r.blocks] == blocks
    assert r.done and r.error is None and r.first_byte == 0.0
    assert r.ttft() == min(r.first[k] for k in ("reasoning", "text", "tool") if k in r.first)
    assert r.early_text_times == sorted(r.early_text_times) and len(r.early_text_times) == min(r.content_chunks, 6)


def test_anthropic_blocks_are_rebuilt_with_their_signature_and_tool_input():
    r = collect("anthropic_tool", by_line("anthropic_tool"))
    thinking, text, tool = r.blocks
    assert thinking["thinking"] == "Let me look." and thinking["signature"]
    assert text["text"] == "I will read it."
    assert tool["name"] == "read_file" and tool["input"] == {"path": "src/main.py"}
    assert r.usage == {"input_tokens": 11, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 192,
                       "output_tokens": 49}  # message_delta's usage, as sent


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(EXPECTED)), st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_any_chunking_reads_the_same(name, cuts):
    blob = (STREAMS / f"{name}.sse").read_bytes()
    points = sorted({min(c, len(blob)) for c in cuts})
    chunks, last = [], 0
    for p in points + [len(blob)]:
        chunks.append(blob[last:p])
        last = p
    whole = collect(name, [blob])
    split = collect(name, chunks)
    for field in ("text", "reasoning", "usage", "stop_reason", "blocks", "done", "content_chunks", "events"):
        assert getattr(split, field) == getattr(whole, field), field
    assert list(split.first) == list(whole.first) or set(split.first) == set(whole.first)
    # each first-event time is the index of the chunk that completed the event
    for kind, t in split.first.items():
        assert t <= len(chunks)


def test_error_events():
    chat = sse.StreamCollector("chat")
    chat.feed(b'data: {"error": {"message": "engine failed", "type": "server_error"}}\n\ndata: [DONE]\n\n', 1.0)
    assert "engine failed" in chat.close(2.0).error
    anth = sse.StreamCollector("anthropic")
    anth.feed(b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}\n\n', 1.0)
    r = anth.close(2.0)
    assert "overloaded_error" in r.error and r.first["finish"] == 1.0
    resp = sse.StreamCollector("responses")
    resp.feed(b'event: response.failed\ndata: {"type": "response.failed", "response": {"status": "failed", '
              b'"error": {"code": "server_error"}}}\n\n', 1.0)
    assert "server_error" in resp.close(2.0).error


def test_usage_from_tail():
    for name in ("chat_tool", "anthropic_tool", "responses_tool"):
        blob = (STREAMS / f"{name}.sse").read_bytes()
        assert sse.usage_from_tail(name.split("_")[0], blob[-sse.TAIL_BYTES:]) == 49
    with pytest.raises(sse.StreamError):
        sse.usage_from_tail("chat", b"data: [DONE]\n\n")


def test_request_bodies():
    assert sse.request("chat", "hi") == ("/v1/chat/completions", {
        "model": "smollm2", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    path, body = sse.request("anthropic", "hi", model="claude-smollm2")
    assert path == "/v1/messages" and body["max_tokens"] == 256
    path, body = sse.request("responses", "hi", tools=[], max_tokens=5)
    assert body == {"model": "smollm2", "stream": True, "input": "hi", "store": False, "max_output_tokens": 5,
                    "tools": []}
    with pytest.raises(ValueError):
        sse.request("gemini", "hi")


def _transport(name: str, status: int = 200) -> httpx.MockTransport:
    chunks = by_line(name)

    def handler(request: httpx.Request) -> httpx.Response:
        if status != 200:
            return httpx.Response(status, json={"error": "no"})
        return httpx.Response(200, stream=httpx.ByteStream(b"".join(chunks)), headers={"x-agentserve-prefix": "reuse=1"})

    return httpx.MockTransport(handler)


async def test_stream_async_and_sync_over_http():
    async with httpx.AsyncClient(transport=_transport("chat_think"), base_url="http://t") as c:
        r = await sse.stream(c, "chat", *sse.request("chat", "hi"))
    assert r.status == 200 and r.text == "Hello there friend." and r.e2e >= r.ttft() >= 0
    assert r.headers["x-agentserve-prefix"] == "reuse=1"
    with httpx.Client(transport=_transport("anthropic_think"), base_url="http://t") as c:
        r = sse.stream_sync(c, "anthropic", *sse.request("anthropic", "hi"))
    assert r.reasoning == "Short thought." and r.usage["output_tokens"] == 14
    async with httpx.AsyncClient(transport=_transport("chat_tool"), base_url="http://t") as c:
        tail = await sse.stream_tail(c, *sse.request("chat", "hi"))
    assert sse.usage_from_tail("chat", tail) == 49


async def test_status_other_than_200():
    async with httpx.AsyncClient(transport=_transport("chat_think", 503), base_url="http://t") as c:
        with pytest.raises(sse.StreamError, match="503"):
            await sse.stream(c, "chat", *sse.request("chat", "hi"))
        r = await sse.stream(c, "chat", *sse.request("chat", "hi"), raise_on_status=False)
    assert r.status == 503 and "error" in r.last_data


async def test_a_body_encoded_beforehand_goes_as_it_is_with_its_headers():
    seen: list[httpx.Request] = []
    inner = _transport("anthropic_think")

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return inner.handle_request(request)

    raw = b'{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}'
    with httpx.Client(transport=httpx.MockTransport(handler), base_url="http://t") as c:
        r = sse.stream_sync(c, "anthropic", "/v1/messages", raw, headers=sse.ANTHROPIC_HEADERS)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://t") as c:
        await sse.stream(c, "anthropic", "/v1/messages", raw)
    assert r.reasoning == "Short thought."
    for req in seen:
        assert req.content == raw and req.headers["content-type"] == "application/json"
    assert seen[0].headers["anthropic-version"] == "2023-06-01"
