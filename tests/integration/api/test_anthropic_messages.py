"""Anthropic Messages API through the real Ray Serve graph, driven by the official `anthropic` SDK.

Scripted model output comes from tests/integration/anthropic_rules.py; harness-contracts F1-F8 are the spec.
"""

from __future__ import annotations

import copy
import json

import anthropic
import httpx
import pytest

from tests.integration.conftest import sse_events

pytestmark = pytest.mark.integration

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "test", "content-type": "application/json"}
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a place",
    "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"location": {"type": "string"}, "units": {"type": "object"}},
        "required": ["location"],
        "additionalProperties": False,
    },
}
FILE_TOOLS = [
    {"name": "read_file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "list_dir", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
]


@pytest.fixture(scope="module")
def client(graph_url):
    return anthropic.Anthropic(base_url=graph_url, api_key="test", max_retries=0)


def raw_stream(url: str, body: dict, headers: dict | None = None) -> tuple[httpx.Response, list[tuple[str, dict]]]:
    with httpx.stream(
        "POST", f"{url}/v1/messages?beta=true", json=body, headers={**HEADERS, **(headers or {})}, timeout=60
    ) as r:
        lines = list(r.iter_lines())
    assert "data: [DONE]" not in lines
    return r, [(name, json.loads(data)) for name, data in sse_events(lines)]


def check_grammar(frames: list[tuple[str, dict]]) -> None:
    """message_start ping* block* message_delta message_stop, blocks well nested, event == data.type."""
    names = [n for n, _ in frames]
    assert all(n == d["type"] for n, d in frames), names
    core = [(n, d) for n, d in frames if n not in ("ping", "tool_call_dispatch")]
    assert core[0][0] == "message_start" and core[-2][0] == "message_delta" and core[-1][0] == "message_stop"
    open_index, next_index = None, 0
    for name, data in core[1:-2]:
        if name == "content_block_start":
            assert open_index is None and data["index"] == next_index
            open_index, next_index = data["index"], next_index + 1
        elif name == "content_block_delta":
            assert data["index"] == open_index
        else:
            assert name == "content_block_stop" and data["index"] == open_index
            open_index = None
    assert open_index is None


def test_f1_streaming_text_grammar_usage_and_headers(graph_url, client):
    body = {"model": MODEL, "max_tokens": 256, "stream": True, "messages": [{"role": "user", "content": "Say hi"}]}
    r, frames = raw_stream(
        graph_url, body, {"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,made-up-beta-2099-01-01"}
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["request-id"].startswith("req_")
    check_grammar(frames)
    start = frames[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["model"] == MODEL
    count = client.messages.count_tokens(model=MODEL, messages=body["messages"]).input_tokens
    usage = start["usage"]
    assert usage["input_tokens"] == count > 0
    assert usage["cache_read_input_tokens"] == 0 and usage["cache_creation_input_tokens"] == 0
    delta = [d for n, d in frames if n == "message_delta"][0]
    assert delta["delta"]["stop_reason"] == "end_turn" and delta["usage"]["output_tokens"] > 1
    u = delta["usage"]
    assert u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] == count
    text = "".join(d["delta"]["text"] for n, d in frames if n == "content_block_delta")
    assert text == "Hello! How can I help?"


def test_f2_f3_tools_with_thinking_signatures_and_dispatch(graph_url, client):
    body = {
        "model": MODEL, "max_tokens": 2048, "stream": True, "tools": [WEATHER], "tool_choice": {"type": "any"},
        # tool_choice any is enforced while decoding; reasoning before the calls stays free when thinking is on
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "AS_WEATHER in Paris and Zürich?"}],
    }
    _, frames = raw_stream(graph_url, body)
    check_grammar(frames)
    kinds = [d["content_block"]["type"] for n, d in frames if n == "content_block_start"]
    assert kinds == ["thinking", "tool_use", "tool_use"]
    # signature_delta immediately before the thinking block's stop
    i = next(k for k, (n, d) in enumerate(frames) if n == "content_block_stop" and d["index"] == 0)
    assert frames[i - 1][1]["delta"]["type"] == "signature_delta"
    # each tool block's input_json_delta fragments concatenate to its input; dispatch follows the stop
    for index in (1, 2):
        start = next(d for n, d in frames if n == "content_block_start" and d["index"] == index)
        assert start["content_block"]["id"].startswith("toolu_") and start["content_block"]["input"] == {}
        frags = "".join(d["delta"]["partial_json"] for n, d in frames
                        if n == "content_block_delta" and d["index"] == index)
        stop_at = next(k for k, (n, d) in enumerate(frames) if n == "content_block_stop" and d["index"] == index)
        dispatch = frames[stop_at + 1]
        assert dispatch[0] == "tool_call_dispatch" and dispatch[1]["index"] == index
        assert dispatch[1]["tool_use"]["input"] == json.loads(frags)
    assert [d for n, d in frames if n == "message_delta"][0]["delta"]["stop_reason"] == "tool_use"

    # The SDK's streaming helper (dispatch events on) and the non-streaming call agree.
    body.pop("stream")
    with client.messages.stream(**body) as stream:
        streamed = stream.get_final_message()
    plain = client.messages.create(**body)
    for msg in (streamed, plain):
        assert [b.type for b in msg.content] == ["thinking", "tool_use", "tool_use"]
        assert msg.content[0].thinking == "I should look up both cities." and msg.content[0].signature
        assert msg.content[1].input == {"location": "Paris"}
        assert msg.content[2].input == {"location": "Zürich", "units": {"temp": "C"}}
        assert len({msg.content[1].id, msg.content[2].id}) == 2
        assert msg.stop_reason == "tool_use"
    assert plain.content[0].signature == streamed.content[0].signature

    # Turn 2: echo the assistant content unmodified, results as string and blocks with is_error.
    a, b = plain.content[1].id, plain.content[2].id
    follow = client.messages.create(
        model=MODEL, max_tokens=256, tools=[WEATHER],
        messages=[
            body["messages"][0],
            {"role": "assistant", "content": [blk.model_dump() for blk in plain.content]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": a, "content": "AS_RESULT_SEEN ok"},
                {"type": "tool_result", "tool_use_id": b, "is_error": True,
                 "content": [{"type": "text", "text": "ENOENT"}], "cache_control": {"type": "ephemeral"}},
            ]},
        ],
    )
    assert follow.content[-1].text == "Both results are in."
    assert follow.usage.cache_read_input_tokens > 0  # the first turn's prompt is a cached prefix


def test_f4_interleaved_thinking_and_tools_round_trip(client):
    kwargs = dict(model=MODEL, max_tokens=4096, tools=FILE_TOOLS,
                  thinking={"type": "enabled", "budget_tokens": 2048},
                  extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
    first = [{"role": "user", "content": "AS_INTERLEAVED please"}]
    with client.messages.stream(messages=first, **kwargs) as stream:
        msg = stream.get_final_message()
    assert [b.type for b in msg.content] == ["thinking", "tool_use", "thinking", "tool_use"]
    assert msg.content[2].thinking == "Then I list the folder."
    history = [
        *first,
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]
            + [{"type": "redacted_thinking", "data": "opaque-bytes"}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": msg.content[1].id, "content": "AS_RESULT_SEEN a"},
            {"type": "tool_result", "tool_use_id": msg.content[3].id, "content": "b.txt"},
        ]},
    ]
    for thinking in ({"type": "enabled", "budget_tokens": 2048}, {"type": "adaptive", "display": "omitted"},
                     {"type": "disabled"}):
        reply = client.messages.create(**{**kwargs, "thinking": thinking}, messages=history)
        assert reply.content[-1].text == "Both results are in."
        # thinking off: no thinking blocks (the model's markup never leaks into text either)
        assert [b.type for b in reply.content] == (["text"] if thinking["type"] == "disabled" else ["thinking", "text"])
    # Thinking modified on replay is refused, as Anthropic does.
    tampered = copy.deepcopy(history)
    tampered[1]["content"][0]["thinking"] = "I was told to do something else."
    with pytest.raises(anthropic.BadRequestError) as exc:
        client.messages.create(**kwargs, messages=tampered)
    assert "signature" in exc.value.body["error"]["message"]


def test_disable_parallel_tool_use_and_tool_choice(client):
    msg = client.messages.create(
        model=MODEL, max_tokens=512, tools=[WEATHER],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": "AS_WEATHER both"}],
    )
    assert [b.type for b in msg.content] == ["thinking", "tool_use"] and msg.stop_reason == "tool_use"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=64, tools=[WEATHER],
                               tool_choice={"type": "tool", "name": "nope"},
                               messages=[{"role": "user", "content": "x"}])
    none = client.messages.create(model=MODEL, max_tokens=512, tools=[WEATHER], tool_choice={"type": "none"},
                                  messages=[{"role": "user", "content": "AS_WEATHER both"}])
    assert all(b.type != "tool_use" for b in none.content) and none.stop_reason == "end_turn"


def test_malformed_call_is_not_announced(client):
    with client.messages.stream(model=MODEL, max_tokens=256, tools=[WEATHER],
                                messages=[{"role": "user", "content": "AS_BADCALL"}]) as stream:
        msg = stream.get_final_message()
    assert [b.type for b in msg.content] == ["text"] and msg.stop_reason == "end_turn"


def test_stop_sequences_max_tokens_and_sampling(client):
    msg = client.messages.create(model=MODEL, max_tokens=64, stop_sequences=["END"],
                                 extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 40},
                                 messages=[{"role": "user", "content": "AS_STOPSEQ"}])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "END"
    assert msg.content[0].text == "alpha beta "
    with client.messages.stream(model=MODEL, max_tokens=64, stop_sequences=["END"],
                                messages=[{"role": "user", "content": "AS_STOPSEQ"}]) as stream:
        assert stream.get_final_message().stop_reason == "stop_sequence"
    short = client.messages.create(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "AS_WORDS"}])
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 3


def test_pings_while_waiting_and_during_gaps(graph_url, client):
    body = {"model": MODEL, "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "AS_KEEPALIVE"}]}
    _, frames = raw_stream(graph_url, body)
    check_grammar(frames)
    names = [n for n, _ in frames]
    first_block = names.index("content_block_start")
    assert "ping" in names[1:first_block]  # nothing to say yet: the `<think>` marker is still being decoded
    assert "ping" in names[first_block:]
    with client.messages.stream(**{k: v for k, v in body.items() if k != "stream"}) as stream:
        assert stream.get_final_message().content[-1].text == "Done slowly."


CLAUDE_CODE_BODY = {
    "model": MODEL,
    "max_tokens": 1024,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.200.abc; cc_entrypoint=cli; cch=1a2b3;"},
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
         "cache_control": {"type": "ephemeral", "ttl": "1h", "scope": "global"}},
        {"type": "text", "text": "Be concise. Use tools when helpful." * 20, "cache_control": {"type": "ephemeral"}},
    ],
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>Today is a test.</system-reminder>"},
            {"type": "text", "text": "What is up?", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ]},
        {"role": "system", "content": [{"type": "text", "text": "# Environment\nplatform: linux",
                                        "cache_control": {"type": "ephemeral"}}]},
    ],
    "tools": [WEATHER],
    "metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "s"})},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "thinking": {"type": "adaptive"},
    "service_tier": "auto",
}
CC_BETAS = {"anthropic-beta": "claude-code-20250219,context-management-2025-06-27,prompt-caching-scope-2026-01-05,"
                              "mid-conversation-system-2026-04-07,effort-2025-11-24"}


def _metric(graph_url: str, name: str) -> float:
    total = 0.0
    for line in httpx.get(f"{graph_url}/metrics").text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_f5_f6_claude_code_request_billing_header_and_count_parity(graph_url):
    stripped_before = _metric(graph_url, "agentserve_anthropic_preamble_stripped_total")
    r1, frames1 = raw_stream(graph_url, {**CLAUDE_CODE_BODY, "stream": True}, CC_BETAS)
    assert r1.status_code == 200
    check_grammar(frames1)
    body2 = copy.deepcopy(CLAUDE_CODE_BODY)
    body2["system"][0]["text"] = body2["system"][0]["text"].replace("cch=1a2b3", "cch=9f8e7")
    _, frames2 = raw_stream(graph_url, {**body2, "stream": True}, CC_BETAS)
    final2 = [d for n, d in frames2 if n == "message_delta"][0]["usage"]
    assert final2["cache_read_input_tokens"] > 0.9 * frames2[0][1]["message"]["usage"]["input_tokens"]

    count_body = {k: v for k, v in CLAUDE_CODE_BODY.items() if k not in ("max_tokens", "stream", "metadata")}
    count = httpx.post(f"{graph_url}/v1/messages/count_tokens?beta=true", json=count_body,
                       headers={**HEADERS, **CC_BETAS}).json()["input_tokens"]
    start = frames1[0][1]["message"]["usage"]
    assert count == start["input_tokens"] + start["cache_read_input_tokens"] + start["cache_creation_input_tokens"]
    # the billing header is not counted: the same body without it counts the same
    no_header = {**count_body, "system": count_body["system"][1:]}
    assert httpx.post(f"{graph_url}/v1/messages/count_tokens", json=no_header, headers=HEADERS).json() == {
        "input_tokens": count}
    assert _metric(graph_url, "agentserve_anthropic_preamble_stripped_total") >= stripped_before + 3


def test_f6_count_tokens_burst(graph_url):
    import concurrent.futures as cf

    count_body = {k: v for k, v in CLAUDE_CODE_BODY.items() if k not in ("max_tokens", "metadata")}

    def one(_):
        return httpx.post(f"{graph_url}/v1/messages/count_tokens?beta=true", json=count_body, headers=HEADERS,
                          timeout=60)

    with cf.ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(20)))
    assert {r.status_code for r in results} == {200}
    assert len({r.json()["input_tokens"] for r in results}) == 1


def test_f7_models_in_anthropic_shape(graph_url, client):
    page = client.models.list(limit=1000)
    ids = [m.id for m in page.data]
    assert MODEL in ids and "claude-smollm2" in ids
    r = httpx.get(f"{graph_url}/v1/models?limit=1000", headers={"anthropic-version": "2023-06-01",
                                                                  "authorization": "Bearer x"},
                  follow_redirects=False)
    assert r.status_code == 200
    body = r.json()
    assert body["has_more"] is False and body["first_id"] == ids[0] and body["last_id"] == ids[-1]
    card = body["data"][0]
    assert card["type"] == "model" and card["created_at"].endswith("Z") and card["max_input_tokens"] == 8192
    assert client.models.retrieve(MODEL).id == MODEL  # the SDK sends HuggingFaceTB%2FSmolLM2-135M-Instruct
    raw = httpx.get(f"{graph_url}/v1/models/{MODEL}", headers={"anthropic-version": "2023-06-01"})
    assert raw.json()["id"] == MODEL and raw.json()["type"] == "model"
    two = client.models.list(limit=2)
    assert two.has_more and len(two.data) == 2
    rest = client.models.list(limit=2, after_id=two.last_id)
    assert [m.id for m in rest.data] == ids[2:4]
    with pytest.raises(anthropic.NotFoundError) as exc:
        client.models.retrieve("no-such/model")
    assert exc.value.body["error"]["type"] == "not_found_error"
    # without anthropic-version: OpenAI's shape
    assert httpx.get(f"{graph_url}/v1/models").json()["object"] == "list"
    # a message to the slashed id echoes it
    assert client.messages.create(model=MODEL, max_tokens=32, messages=[{"role": "user", "content": "hi"}]).model == MODEL


def test_f8_error_envelopes(graph_url, client):
    r = httpx.post(f"{graph_url}/v1/messages?beta=true", content=b"{nope", headers=HEADERS)
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["request_id"] == r.headers["request-id"]
    r = httpx.post(f"{graph_url}/v1/messages", json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
                   headers=HEADERS)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as exc:
        client.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as exc:
        client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "word " * 9000}])
    assert exc.value.body["error"]["message"].startswith("prompt is too long: ")
    assert exc.value.body["error"]["message"].endswith(" tokens > 8192 maximum")
    with pytest.raises(anthropic.BadRequestError):  # a text-only model
        client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 2048},
                               messages=[{"role": "user", "content": "x"}])
    r = httpx.get(f"{graph_url}/health")
    assert r.headers["request-id"]


def test_malformed_bodies_over_http_are_4xx_in_the_envelope(graph_url):
    """A sample of the unit-level hypothesis bodies, end to end: never a 5xx, always Anthropic's envelope."""
    from hypothesis import HealthCheck, given, settings

    from tests.unit.apis.test_anthropic_decode import malformed_bodies

    with httpx.Client(base_url=graph_url, headers=HEADERS, timeout=60) as http:

        @settings(max_examples=25, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
        @given(malformed_bodies())
        def check(body):
            body.pop("stream", None)
            r = http.post("/v1/messages?beta=true", json=body)
            assert r.status_code < 500, (body, r.text)
            if r.status_code >= 400:
                err = r.json()
                assert err["type"] == "error" and err["request_id"] == r.headers["request-id"]
                assert err["error"]["type"] in ("invalid_request_error", "not_found_error")

        check()


def _kind_count(graph_url: str, kind: str) -> float:
    total = 0.0
    for line in httpx.get(f"{graph_url}/metrics").text.splitlines():
        if line.startswith("agentserve_requests_by_kind_total{") and f'kind="{kind}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_request_kinds_from_claude_code_headers(graph_url, client):
    """A tool result, a compaction and a subagent's first request, as Claude Code sends them, are each counted
    under their kind (what an operator's dashboard splits traffic by)."""
    kinds = ("tool_result", "compaction", "subagent_spawn", "user_message")
    before = {k: _kind_count(graph_url, k) for k in kinds}
    session = {"x-claude-code-session-id": "lineage-it-1"}
    history = [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"location": "Paris"}}]},
    ]
    client.messages.create(model=MODEL, max_tokens=8, tools=[WEATHER], extra_headers=session, messages=[
        *history, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}]}])
    client.messages.create(model=MODEL, max_tokens=8, extra_headers=session, messages=[
        *history[:1], {"role": "assistant", "content": "It is 18C in Paris."},
        {"role": "user", "content": "Your task is to create a detailed summary of the conversation so far, "
                                    "paying close attention to the user's explicit requests."}])
    client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Search the repo."}],
                           extra_headers={**session, "x-claude-code-agent-id": "agent-7"})
    after = {k: _kind_count(graph_url, k) for k in kinds}
    assert {k: after[k] - before[k] for k in kinds} == {
        "tool_result": 1, "compaction": 1, "subagent_spawn": 1, "user_message": 0}


def test_thinking_display_omitted_streams_signatures_only_and_replays_the_real_reasoning(graph_url, client):
    """`display: "omitted"`: each thinking block streams as start, signature_delta, stop (no thinking_delta, empty
    `thinking`); sent back so, the blocks are accepted and the next prompt renders the reasoning the model wrote:
    it counts as the text-shown history does and reuses the whole first turn from the prefix cache."""
    body = {"model": MODEL, "max_tokens": 4096, "stream": True, "tools": FILE_TOOLS,
            "thinking": {"type": "adaptive", "display": "omitted"},
            "messages": [{"role": "user", "content": "AS_INTERLEAVED omitted please"}]}
    r, frames = raw_stream(graph_url, body, {"anthropic-beta": "interleaved-thinking-2025-05-14"})
    assert r.status_code == 200
    check_grammar(frames)
    deltas = [d["delta"]["type"] for n, d in frames if n == "content_block_delta"]
    assert "thinking_delta" not in deltas and deltas.count("signature_delta") == 2
    starts = [d["content_block"] for n, d in frames if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "tool_use", "thinking", "tool_use"]
    assert starts[0] == {"type": "thinking", "thinking": "", "signature": ""}
    signatures = [d["delta"]["signature"] for n, d in frames if n == "content_block_delta"
                  and d["delta"]["type"] == "signature_delta"]
    first_usage = frames[0][1]["message"]["usage"]
    out_tokens = [d for n, d in frames if n == "message_delta"][0]["usage"]["output_tokens"]
    calls = [b for b in starts if b["type"] == "tool_use"]
    inputs = [{"path": "a.txt"}, {"path": "."}]
    assistant = [{"type": "thinking", "thinking": "", "signature": signatures[0]},
                 {**calls[0], "input": inputs[0]},
                 {"type": "thinking", "thinking": "", "signature": signatures[1]},
                 {**calls[1], "input": inputs[1]}]
    history = [*body["messages"], {"role": "assistant", "content": assistant}, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": calls[0]["id"], "content": "AS_RESULT_SEEN a"},
        {"type": "tool_result", "tool_use_id": calls[1]["id"], "content": "b.txt"}]}]
    shown = copy.deepcopy(history)
    shown[1]["content"][0]["thinking"], shown[1]["content"][2]["thinking"] = (
        "First I read the file.", "Then I list the folder.")
    kwargs = dict(model=MODEL, tools=FILE_TOOLS, thinking={"type": "adaptive", "display": "omitted"})
    assert (client.messages.count_tokens(**kwargs, messages=history).input_tokens
            == client.messages.count_tokens(**kwargs, messages=shown).input_tokens)
    reply = client.messages.create(**kwargs, max_tokens=4096, messages=history)
    assert [b.type for b in reply.content] == ["thinking", "text"] and reply.content[0].thinking == ""
    assert reply.content[-1].text == "Both results are in."
    prompt1 = first_usage["input_tokens"] + first_usage["cache_read_input_tokens"]
    assert reply.usage.cache_read_input_tokens >= prompt1 + out_tokens - 32  # all but the last partial block


def test_anthropic_defined_client_tools_are_offered_and_called_by_their_declared_name(client):
    """An Agent-SDK-style request with `text_editor_20250728` and `bash_20250124` (no input_schema): the model is
    offered both and its call comes back as a tool_use under the declared name, for the harness to run."""
    tools = [{"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 10000},
             {"type": "bash_20250124", "name": "bash"}, {"type": "web_search_20250305", "name": "web_search"}]
    messages = [{"role": "user", "content": "AS_CLIENT_TOOL fix the typo in README.md"}]
    count = client.messages.count_tokens(model=MODEL, tools=tools, messages=messages).input_tokens
    assert count > client.messages.count_tokens(model=MODEL, tools=tools[2:], messages=messages).input_tokens + 100
    msg = client.messages.create(model=MODEL, max_tokens=256, tools=tools, messages=messages)
    assert msg.stop_reason == "tool_use"
    (call,) = [b for b in msg.content if b.type == "tool_use"]
    assert call.name == "str_replace_based_edit_tool" and call.id.startswith("toolu_")
    assert call.input == {"command": "str_replace", "path": "/repo/README.md", "old_str": "helo", "new_str": "hello"}
    follow = client.messages.create(model=MODEL, max_tokens=64, tools=tools, messages=[
        *messages, {"role": "assistant", "content": msg.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "AS_RESULT_SEEN ok"}]}])
    assert follow.content[-1].text == "Both results are in."


def _mcp_tool(name: str, **extra) -> dict:
    return {"name": name, "description": f"GitHub MCP: {name}.", **extra,
            "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}}}


def test_tool_search_session_keeps_its_prefix_across_a_tool_addition(client):
    """Claude Code with tool search on: deferred MCP tools stay out of the prompt until a mid-conversation system
    message adds one; the request that adds it is served (vLLM answers it with a 400), reuses the whole previous
    prompt from the cache, and the model may call the added tool. Folding the tool into `tools` instead (the anchor)
    re-renders from the tool list's new entry on."""
    def session(tag: str, tools: list[dict], addition: list[dict], later_tools: list[dict] | None = None):
        first = [{"role": "user", "content": f"AS_WORDS {tag}: which repositories do I have?"}]
        r1 = client.messages.create(model=MODEL, max_tokens=16, system="You are a coding agent.", tools=tools,
                                    messages=first)
        tools = later_tools or tools
        messages = [*first, {"role": "assistant", "content": r1.content}, *addition,
                    {"role": "user", "content": "AS_LATE_TOOL file an issue"}]
        r2 = client.messages.create(model=MODEL, max_tokens=64, system="You are a coding agent.", tools=tools,
                                    messages=messages)
        u1 = r1.usage
        return u1.input_tokens + u1.cache_read_input_tokens + u1.cache_creation_input_tokens, r2

    base = [WEATHER, _mcp_tool("mcp__github__list_repos")]
    deferred = [*base, _mcp_tool("mcp__github__create_issue", defer_loading=True)]
    added = [{"role": "system", "content": [
        {"type": "text", "text": "The github MCP server connected."},
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "mcp__github__create_issue"}}]}]
    prompt1, in_place = session("in place", deferred, added)
    assert in_place.stop_reason == "tool_use"
    assert [b.name for b in in_place.content if b.type == "tool_use"] == ["mcp__github__create_issue"]
    assert in_place.usage.cache_read_input_tokens >= prompt1 - 32  # all but the last partial block

    _, anchor = session("anchor", base, [], [*base, _mcp_tool("mcp__github__create_issue")])
    assert [b.name for b in anchor.content if b.type == "tool_use"] == ["mcp__github__create_issue"]
    # The anchor keeps only what precedes the new entry in the tool list (this template lists tools at the end of the
    # system message): the first exchange after it is prefilled again, at least two blocks here.
    assert anchor.usage.cache_read_input_tokens <= in_place.usage.cache_read_input_tokens - 32
