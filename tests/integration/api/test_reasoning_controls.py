"""Reasoning budgets and effort in all three APIs, through the real graph: the engine ends reasoning with the
model's own end marker once the budget is spent, and the answer follows."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

pytestmark = pytest.mark.integration

MODEL = "smollm2"
LONG = [{"role": "user", "content": "RX_LONG think hard"}]


@pytest.fixture(scope="module")
def oai(graph_url):
    return openai.OpenAI(base_url=f"{graph_url}/v1", api_key="unused", max_retries=0)


def _tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def test_chat_reasoning_effort_bounds_reasoning(oai, tokenizer):
    free = oai.chat.completions.create(model=MODEL, messages=LONG)
    low = oai.chat.completions.create(model=MODEL, messages=LONG, extra_body={"reasoning_effort": "minimal"})
    assert _tokens(tokenizer, free.choices[0].message.model_extra["reasoning_content"]) > 500
    assert _tokens(tokenizer, low.choices[0].message.model_extra["reasoning_content"]) <= 128 + 1
    assert low.choices[0].message.content == "Done."
    assert low.usage.completion_tokens < free.usage.completion_tokens - 400


def test_chat_effort_none_ends_reasoning_at_once(oai):
    resp = oai.chat.completions.create(model=MODEL, messages=LONG, extra_body={"reasoning_effort": "none"})
    assert not (resp.choices[0].message.model_extra.get("reasoning_content") or "").strip()
    assert resp.choices[0].message.content == "Done."


def test_responses_reasoning_effort(oai, tokenizer):
    resp = oai.responses.create(model=MODEL, input=LONG[0]["content"], reasoning={"effort": "low"},
                                include=["reasoning.encrypted_content"])
    reasoning = "".join(c.text for i in resp.output if i.type == "reasoning" for c in (i.content or []))
    assert 0 < _tokens(tokenizer, reasoning) <= 512 + 1
    assert resp.output_text == "Done."


def test_anthropic_budget_tokens(graph_url, tokenizer):
    client = anthropic.Anthropic(base_url=graph_url, api_key="unused", max_retries=0)
    msg = client.messages.create(model=MODEL, max_tokens=4000, messages=LONG,
                                 thinking={"type": "enabled", "budget_tokens": 1024})
    thinking = "".join(b.thinking for b in msg.content if b.type == "thinking")
    assert _tokens(tokenizer, thinking) > 500  # under budget: untouched
    r = httpx.post(f"{graph_url}/v1/messages", headers={"anthropic-version": "2023-06-01"}, json={
        "model": MODEL, "max_tokens": 4000, "messages": LONG, "output_config": {"effort": "minimal"}})
    assert r.status_code == 200, r.text
    blocks = r.json()["content"]
    assert _tokens(tokenizer, "".join(b.get("thinking", "") for b in blocks)) <= 128 + 1
    assert [b["text"] for b in blocks if b["type"] == "text"] == ["Done."]


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/v1/responses", {"input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "x"},
         "reasoning_effort"),
    ],
)
def test_unknown_effort_is_400(graph_url, path, body, param):
    r = httpx.post(f"{graph_url}{path}", json={"model": MODEL, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param
