"""Tenants sharing the engines, tried as an attacker would through the real graph (2 scripted engine replicas that
publish real KV events, no keys configured: each caller is known by the key it presents, none by presenting none).

- the prefix cache is partitioned per key: a second key sending the same prompt is told it cached nothing (no
  prompt-guessing oracle in `cached_tokens`), while the first key's own repeat is served from its cache, and the
  router's prefix index (fed by the engines' salted KV events) still sends it to the replica that holds it;
- without keys the prefix doctor's `x-agentserve-prefix` header is off: an attacker replaying a guessed first
  message and reply in the victim's session learns nothing of how much of its guess was right.
"""

from __future__ import annotations

import time

import httpx
import pytest
from ray import serve

from agentserve.bench.graph import wait_for
from tests.support.graph import running_graph

pytestmark = pytest.mark.integration

RULES = [{"match": "", "reply": "The deploy token is 7f3a-secret.", "itl_ms": 0}]


def _stats():
    return serve.get_deployment_handle("Router", app_name="agentserve").stats.remote().result()


@pytest.fixture(scope="module")
def url(model_path):
    args = {
        "engine": {"kind": "scripted", "block_size": 16, "rules": RULES, "num_replicas": 2,
                   "cache": {"capacity_blocks": 4096}},
    }
    with running_graph(args) as u:
        wait_for(lambda: len(_stats().replicas) == 2, timeout=60)
        yield u


def chat(url, messages, key=None):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": "smollm2", "messages": messages},
                   headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return r


def cached(r) -> int:
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_another_key_sending_the_same_prompt_reports_no_cached_tokens(url):
    prompt = [{"role": "system", "content": f"Tenant A's confidential runbook {time.time()}. " * 30},
              {"role": "user", "content": "What is the deploy token?"}]
    first = chat(url, prompt, "sk-tenant-a")
    n = first.json()["usage"]["prompt_tokens"]
    assert cached(first) == 0
    again = chat(url, prompt, "sk-tenant-a")  # the same key: its whole prompt but the last partial block is reused
    assert cached(again) >= (n - 1) // 16 * 16
    assert cached(chat(url, prompt, "sk-tenant-b")) == 0  # the attacker: nothing says A sent this prompt
    assert cached(chat(url, prompt, None)) == 0  # nor to the keyless caller
    assert cached(chat(url, prompt, "sk-tenant-b")) >= (n - 1) // 16 * 16  # B's own repeat: B's cache
    # The router indexed the salted blocks the engines published, under the salt the preprocessor hashed with.
    assert max(v.indexed_blocks for v in _stats().replicas.values()) > 0
    assert cached(chat(url, prompt, "sk-tenant-a")) >= (n - 1) // 16 * 16


def test_without_keys_the_prefix_header_is_no_oracle(url):
    """The victim and the attacker present no key: one identity, and the attacker knows the first message (the
    session key is its hash). Replaying it with a guessed reply, the attacker gets no reuse count back."""
    first = [{"role": "user", "content": f"victim session {time.time()}: deploy payroll"}]
    reply = chat(url, first).json()["choices"][0]["message"]["content"]
    follow = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "and then?"}]
    assert "x-agentserve-prefix" not in chat(url, follow).headers  # the victim's own follow-up: no header either
    for guess in (reply, "The deploy token is 0000-wrong."):
        probe = [*first, {"role": "assistant", "content": guess}, {"role": "user", "content": "and then?"}]
        assert "x-agentserve-prefix" not in chat(url, probe).headers
