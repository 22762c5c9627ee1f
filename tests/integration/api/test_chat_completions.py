"""Chat Completions through the real Ray Serve graph (scripted engine, real tokenizer and template)."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from ray import serve

from agentserve.protocol.cluster import EngineReplicaStats
from tests.integration.conftest import WEATHER_TOOL, data_json, sse_events

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(graph_url):
    return openai.OpenAI(base_url=f"{graph_url}/v1", api_key="unused")


def test_non_streaming_reply_with_usage(client, tokenizer):
    resp = client.chat.completions.create(
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        messages=[{"role": "user", "content": "hi there"}],
    )
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.content == "Hello! How can I help?"
    assert resp.choices[0].finish_reason == "stop"
    # EOS is an output token, as vLLM counts it.
    assert resp.usage.completion_tokens == len(tokenizer.encode("Hello! How can I help?")) + 1
    assert resp.usage.prompt_tokens_details.cached_tokens is not None


def test_prompt_tokens_equal_tokenize_of_same_messages(client, graph_url):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi there"}]
    resp = client.chat.completions.create(model="smollm2", messages=messages)
    count = httpx.post(f"{graph_url}/v1/tokenize", json={"model": "smollm2", "messages": messages}).json()
    assert resp.usage.prompt_tokens == count["count"]


def test_reasoning_is_split_from_content(client):
    resp = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "think: what is 2+2?"}]
    )
    msg = resp.choices[0].message
    assert msg.content == "The answer is 4."
    assert msg.model_extra["reasoning_content"] == "Let me think."


def test_streamed_reasoning_two_tool_calls_and_text(client):
    stream = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "weather in Paris and Zürich?"}],
        tools=[WEATHER_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    reasoning, content, calls, finish, usage = "", "", {}, None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        # With tool dispatch on (this graph), the SDK also surfaces each `tool_call_dispatch` event
        # as a chunk without choices.
        for choice in chunk.choices or []:
            d = choice.delta
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            content += d.content or ""
            for tc in d.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "name": None, "args": ""})
                call["id"] = tc.id or call["id"]
                if tc.function and tc.function.name:
                    call["name"] = tc.function.name
                call["args"] += (tc.function.arguments or "") if tc.function else ""
            finish = choice.finish_reason or finish
    assert reasoning == "I should look up both cities."
    assert content == "Checking both now."
    assert finish == "tool_calls"
    assert [c["name"] for c in calls.values()] == ["get_weather", "get_weather"]
    assert json.loads(calls[0]["args"]) == {"city": "Paris"}
    assert json.loads(calls[1]["args"]) == {"city": "Zürich", "units": {"temp": "C"}}
    assert calls[0]["id"] and calls[0]["id"] != calls[1]["id"]
    assert usage is not None and usage.completion_tokens > 0


def test_non_streaming_tool_calls(client):
    resp = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "weather please"}],
        tools=[WEATHER_TOOL],
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [json.loads(tc.function.arguments)["city"] for tc in choice.message.tool_calls] == [
        "Paris",
        "Zürich",
    ]


def test_tool_dispatch_event_arrives_before_second_call(graph_url):
    body = {
        "model": "smollm2",
        "stream": True,
        "messages": [{"role": "user", "content": "weather in two cities"}],
        "tools": [WEATHER_TOOL],
    }
    with httpx.stream("POST", f"{graph_url}/v1/chat/completions", json=body, timeout=60) as r:
        events = sse_events(r.iter_lines())
    names = [e for e, _ in events]
    dispatch_at = names.index("tool_call_dispatch")
    dispatch = json.loads(events[dispatch_at][1])
    assert dispatch["tool_call"]["index"] == 0
    assert json.loads(dispatch["tool_call"]["function"]["arguments"]) == {"city": "Paris"}
    second_call_at = next(
        i
        for i, (e, d) in enumerate(events)
        if e is None and d != "[DONE]" and any(
            tc.get("index") == 1
            for ch in json.loads(d).get("choices", [])
            for tc in ch["delta"].get("tool_calls") or []
        )
    )
    assert dispatch_at < second_call_at
    assert names.count("tool_call_dispatch") == 2
    assert events[-1][1] == "[DONE]"


def test_tool_choice_none_is_enforced_while_decoding(client):
    # The scripted engine skips the "weather" reply (it calls tools, which `none` forbids) for one without calls.
    resp = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "weather now"}],
        tools=[WEATHER_TOOL],
        tool_choice="none",
    )
    assert resp.choices[0].finish_reason == "stop"
    assert resp.choices[0].message.content == "Hello! How can I help?"
    assert not resp.choices[0].message.tool_calls


def test_stop_string_cuts_text(client):
    resp = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "stopword"}], stop=["STOP"]
    )
    assert resp.choices[0].message.content == "one two "
    assert resp.choices[0].finish_reason == "stop"


def test_max_tokens_gives_length(client):
    resp = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "hello"}], max_tokens=2
    )
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == 2


def test_repeated_prompt_reports_cached_tokens(client):
    long_system = "You are a careful assistant. " * 60
    messages = [{"role": "system", "content": long_system}, {"role": "user", "content": "hello"}]
    first = client.chat.completions.create(model="smollm2", messages=messages)
    second = client.chat.completions.create(model="smollm2", messages=messages)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < second.usage.prompt_tokens
    assert cached % 16 == 0  # whole blocks only


def _engine_stats() -> EngineReplicaStats:
    return serve.get_deployment_handle("Engine", "agentserve").stats.remote().result()


def test_closing_the_stream_aborts_the_engine_request(graph_url):
    before = _engine_stats()
    body = {"model": "smollm2", "stream": True, "messages": [{"role": "user", "content": "slow please"}]}
    with httpx.stream("POST", f"{graph_url}/v1/chat/completions", json=body, timeout=60) as r:
        got = 0
        for line in r.iter_lines():
            if line.startswith("data:"):
                got += 1
            if got >= 3:
                break
    # 400 tokens at 25 ms would take 10 s; the abort must land long before that.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stats = _engine_stats()
        if stats.aborted > before.aborted and stats.active == 0:
            break
        time.sleep(0.1)
    assert stats.aborted == before.aborted + 1
    assert stats.active == 0


def test_malformed_call_comes_back_as_text_not_a_call(client):
    resp = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "broken call"}], tools=[WEATHER_TOOL]
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    assert '"city": }' in choice.message.content and choice.message.content.endswith("Sorry.")


def test_call_cut_by_max_tokens_is_reported_as_length_with_its_text(client):
    resp = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "weather"}],
        tools=[WEATHER_TOOL],
        max_tokens=30,  # ends inside the first <tool_call>
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "length"
    assert not choice.message.tool_calls
    assert choice.message.content.startswith("<tool_call>")


def test_prefix_header_reports_reuse_and_is_scoped_to_the_caller(graph_url):
    """x-agentserve-prefix compares a session's turn with its previous one, only within one caller's key."""
    first = [{"role": "user", "content": f"prefix header session {time.time()}"}]

    def turn(messages, key):
        r = httpx.post(f"{graph_url}/v1/chat/completions", timeout=60, headers={"authorization": f"Bearer {key}"},
                       json={"model": "smollm2", "messages": messages})
        assert r.status_code == 200, r.text
        return r

    r1 = turn(first, "key-a")
    assert "x-agentserve-prefix" not in r1.headers  # a session's first turn has nothing to compare with
    reply = r1.json()["choices"][0]["message"]["content"]
    follow_up = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "and then?"}]
    same_caller = turn(follow_up, "key-a").headers["x-agentserve-prefix"]
    assert same_caller.startswith("reuse=") and int(same_caller.split("reused=")[1].split(";")[0]) > 0
    assert "x-agentserve-prefix" not in turn(follow_up, "key-b").headers  # another caller learns nothing
