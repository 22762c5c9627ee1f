"""Context accounting through the real graph, with the official SDKs: max_tokens past what the window leaves is
clamped and reported in `x-agentserve-max-tokens-clamped` (Claude Code asks for a fixed 32K); a prompt that alone
fills the window is refused in each API's own error shape."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from agentserve.config import ModelSpec

pytestmark = pytest.mark.integration

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
WINDOW = ModelSpec().context_window  # the package graph's model (tests/integration/conftest.py GRAPH_ARGS)
REPLY = "Hello! How can I help?"  # the scripted engine's default reply, longer than the 3 tokens left
CLAMPED = "x-agentserve-max-tokens-clamped"


def _filler(k: int) -> list[dict]:
    return [{"role": "user", "content": "word " * k}]


@pytest.fixture(scope="module")
def claude(graph_url):
    # An explicit timeout: the SDK refuses non-streaming requests with a large max_tokens under its default one.
    return anthropic.Anthropic(base_url=graph_url, api_key="test", timeout=120)


@pytest.fixture(scope="module")
def oai(graph_url):
    return openai.OpenAI(base_url=f"{graph_url}/v1", api_key="test")


def _prompt(usage) -> int:
    """Anthropic's input_tokens leaves out what the cache served: the prompt is the sum."""
    return usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)


def _words_for(count, target: int) -> int:
    """How many filler words make a prompt of exactly `target` tokens (each `word ` is one token; checked)."""
    n100, n101 = count(100), count(101)
    assert n101 - n100 == 1
    k = 100 + target - n100
    assert count(k) == target
    return k


def test_anthropic_clamps_max_tokens_and_refuses_only_a_prompt_too_long(claude):
    def count(k: int) -> int:  # the prompt as generation renders it
        return _prompt(claude.messages.create(model=MODEL, max_tokens=1, messages=_filler(k)).usage)

    k = _words_for(count, WINDOW - 3)
    raw = claude.messages.with_raw_response.create(model=MODEL, max_tokens=32_000, messages=_filler(k))
    msg = raw.parse()
    assert raw.headers[CLAMPED] == "3; requested=32000"
    assert _prompt(msg.usage) == WINDOW - 3
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3
    assert REPLY.startswith(msg.content[0].text) and msg.content[0].text != REPLY
    # streaming: the header is on the stream's response too
    with claude.messages.with_streaming_response.create(
        model=MODEL, max_tokens=32_000, messages=_filler(k), stream=True
    ) as stream:
        assert stream.headers[CLAMPED] == "3; requested=32000"
        assert '"stop_reason":"max_tokens"' in "".join(stream.iter_lines()).replace(" ", "")
    # what fits is not touched
    raw = claude.messages.with_raw_response.create(model=MODEL, max_tokens=3, messages=_filler(k))
    assert CLAMPED not in raw.headers and raw.parse().usage.output_tokens == 3
    # one token left: still served; none left: Anthropic's own error
    one = claude.messages.with_raw_response.create(model=MODEL, max_tokens=32_000, messages=_filler(k + 2))
    assert one.headers[CLAMPED] == "1; requested=32000" and one.parse().usage.output_tokens == 1
    with pytest.raises(anthropic.BadRequestError) as exc:
        claude.messages.create(model=MODEL, max_tokens=32_000, messages=_filler(k + 3))
    assert exc.value.body["error"] == {
        "type": "invalid_request_error", "message": f"prompt is too long: {WINDOW} tokens > {WINDOW} maximum",
    }


def test_chat_completions_clamps_and_refuses_with_context_length_exceeded(oai, graph_url):
    def count(k: int) -> int:
        body = {"model": "smollm2", "messages": _filler(k)}
        return httpx.post(f"{graph_url}/v1/tokenize", json=body).json()["count"]

    k = _words_for(count, WINDOW - 3)
    raw = oai.chat.completions.with_raw_response.create(model="smollm2", max_tokens=32_000, messages=_filler(k))
    done = raw.parse()
    assert raw.headers[CLAMPED] == "3; requested=32000"
    assert done.choices[0].finish_reason == "length" and done.usage.completion_tokens == 3
    with oai.chat.completions.with_streaming_response.create(
        model="smollm2", max_completion_tokens=32_000, messages=_filler(k), stream=True
    ) as stream:
        assert stream.headers[CLAMPED] == "3; requested=32000"
        assert '"finish_reason":"length"' in "".join(stream.iter_lines()).replace(" ", "")
    with pytest.raises(openai.BadRequestError) as exc:
        oai.chat.completions.create(model="smollm2", max_tokens=10, messages=_filler(k + 3))
    assert exc.value.code == "context_length_exceeded"
    assert f"maximum context length is {WINDOW} tokens" in exc.value.message


def test_responses_clamps_and_refuses_as_codex_expects(oai):
    first = oai.responses.with_raw_response.create(model="smollm2", max_output_tokens=32_000, input="word " * 100)
    n100 = first.parse().usage.input_tokens
    assert first.headers[CLAMPED] == f"{WINDOW - n100}; requested=32000"
    k = 100 + WINDOW - 3 - n100
    raw = oai.responses.with_raw_response.create(model="smollm2", max_output_tokens=32_000, input="word " * k)
    resp = raw.parse()
    assert raw.headers[CLAMPED] == "3; requested=32000"
    assert resp.usage.input_tokens == WINDOW - 3 and resp.usage.output_tokens == 3
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    with pytest.raises(openai.BadRequestError) as exc:
        oai.responses.create(model="smollm2", input="word " * (k + 3))
    assert exc.value.code == "context_length_exceeded"
    # streaming (Codex): a terminal response.failed carrying the code Codex maps to its context-window error
    events = list(oai.responses.create(model="smollm2", input="word " * (k + 3), stream=True))
    assert events[-1].type == "response.failed"
    assert events[-1].response.error.code == "context_length_exceeded"
