"""Sampling fields through the real graph in all three APIs: stops end the engine's turn, bad values are 400s in
the API's own envelope, and a field that would change the output but is not applied is a 400 naming it."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

pytestmark = pytest.mark.integration

MODEL = "smollm2"


@pytest.fixture(scope="module")
def oai(graph_url):
    return openai.OpenAI(base_url=f"{graph_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def ant(graph_url):
    return anthropic.Anthropic(base_url=graph_url, api_key="unused", max_retries=0)


def _stopped_tokens(tokenizer) -> int:
    # The scripted reply is "one two STOP three four": the engine stops at the token completing "STOP".
    return len(tokenizer.encode("one two STOP"))


def test_chat_stop_ends_the_engine_turn_and_usage_counts_only_what_was_generated(oai, tokenizer):
    resp = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "stopword"}], stop="STOP")
    assert resp.choices[0].message.content == "one two "
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.completion_tokens == _stopped_tokens(tokenizer)


def test_chat_stop_streamed_counts_the_same(oai, tokenizer):
    stream = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "stopword"}], stop=["zzz", "STOP"], stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two "
    assert chunks[-1].usage.completion_tokens == _stopped_tokens(tokenizer)


def test_anthropic_stop_sequence_is_reported_with_its_string(ant, tokenizer):
    msg = ant.messages.create(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "stopword"}], stop_sequences=["STOP"]
    )
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "STOP"
    assert "".join(b.text for b in msg.content if b.type == "text") == "one two "
    assert msg.usage.output_tokens == _stopped_tokens(tokenizer)


def test_anthropic_stop_sequence_streamed(ant):
    with ant.messages.stream(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "stopword"}], stop_sequences=["two"]
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "two"


def test_chat_sampling_fields_are_accepted(oai):
    resp = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], seed=7, top_p=0.9, temperature=0.5,
        presence_penalty=0.5, frequency_penalty=0.5, logit_bias={"42": 5}, extra_body={"top_k": 20},
    )
    assert resp.choices[0].message.content == "Hello! How can I help?"


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"n": 2}, "n"),
        ({"logit_bias": {"not-a-token": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 101}}, "logit_bias"),
        ({"logit_bias": {"999999999": 1}}, "logit_bias"),  # outside the vocabulary
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"top_k": -2}, "top_k"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
        ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
        ({"guided_regex": "a+"}, "guided_regex"),
        ({"min_tokens": 5}, "min_tokens"),
    ],
)
def test_chat_bad_or_unapplied_fields_are_400_naming_param(graph_url, extra, param):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}
    r = httpx.post(f"{graph_url}/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert param in (err.get("param") or err["message"])


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"max_tool_calls": 3}, "max_tool_calls"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"text": {"verbosity": "high"}}, "text.verbosity"),
    ],
)
def test_responses_unapplied_fields_are_400_naming_param(graph_url, extra, param):
    body = {"model": MODEL, "input": "hi", **extra}
    r = httpx.post(f"{graph_url}/v1/responses", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]}, "mcp_servers"),
        ({"container": "c_1"}, "container"),
        ({"top_k": -1}, "top_k"),
    ],
)
def test_anthropic_unapplied_or_bad_fields_are_400_in_its_envelope(graph_url, extra, param):
    body = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], **extra}
    r = httpx.post(f"{graph_url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 400, r.text
    data = r.json()
    assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    assert param in data["error"]["message"]


def test_fields_that_cannot_change_the_output_are_accepted(graph_url):
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "store": False, "metadata": {"a": "b"},
            "service_tier": "auto", "parallel_tool_calls": True, "user": "u1", "safety_identifier": "s"}
    assert httpx.post(f"{graph_url}/v1/chat/completions", json=chat).status_code == 200
    resp = {"model": MODEL, "input": "hi", "store": False, "service_tier": "auto", "prompt_cache_key": "k",
            "include": ["reasoning.encrypted_content"], "truncation": "disabled", "text": {"verbosity": "medium"}}
    assert httpx.post(f"{graph_url}/v1/responses", json=resp).status_code == 200
    ant = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
           "metadata": {"user_id": "u"}, "service_tier": "auto", "context_management": {"edits": []}}
    r = httpx.post(f"{graph_url}/v1/messages", json=ant, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text


# -- logprobs ---------------------------------------------------------------------------------------------------
def test_chat_logprobs_per_token_with_alternatives(oai, tokenizer):
    resp = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], logprobs=True,
                                       top_logprobs=3)
    content = resp.choices[0].logprobs.content
    reply = "Hello! How can I help?"
    assert "".join(t.token for t in content).startswith(reply)
    assert len(content) == resp.usage.completion_tokens  # one entry per generated token
    assert all(len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token for t in content)
    assert bytes(content[0].bytes).decode() == content[0].token


def test_chat_logprobs_streamed_arrive_with_the_text(oai):
    stream = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], logprobs=True,
                                         stream=True)
    tokens = [t.token for c in stream if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert "".join(tokens).startswith("Hello! How can I help?")
    plain = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert plain.choices[0].logprobs is None


def test_responses_output_text_logprobs(oai):
    resp = oai.responses.create(model=MODEL, input="hi", include=["message.output_text.logprobs"], top_logprobs=2)
    part = resp.output[-1].content[0]
    assert "".join(t.token for t in part.logprobs) == resp.output_text == "Hello! How can I help?"
    assert all(len(t.top_logprobs) == 2 for t in part.logprobs)
    with oai.responses.stream(model=MODEL, input="hi", include=["message.output_text.logprobs"]) as stream:
        deltas = [e for e in stream if e.type == "response.output_text.delta"]
    assert "".join(t.token for e in deltas for t in e.logprobs) == "Hello! How can I help?"


def test_top_logprobs_without_logprobs_is_400(graph_url):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}
    r = httpx.post(f"{graph_url}/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_logprobs"
