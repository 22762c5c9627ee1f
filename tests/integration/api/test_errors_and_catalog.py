"""Error envelopes, the model catalog, tokenize/detokenize and metrics through the real graph."""

from __future__ import annotations

import httpx
import openai
import pytest

pytestmark = pytest.mark.integration


def test_unknown_model_is_404_in_openai_envelope(graph_url):
    client = openai.OpenAI(base_url=f"{graph_url}/v1", api_key="unused")
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["code"] == "model_not_found"
    assert exc.value.body["type"] == "not_found_error"


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"{not json", "not valid JSON"),
        (b'{"model": "smollm2"}', "messages"),
        (b'{"model": "smollm2", "messages": []}', "messages"),
        (b'{"model": "smollm2", "messages": [{"role": "wizard", "content": "x"}]}', "role"),
        (b'{"model": "smollm2", "n": 2, "messages": [{"role": "user", "content": "x"}]}', "n=1"),
        (b'{"model": "smollm2", "temperature": 9, "messages": [{"role": "user", "content": "x"}]}', "temperature"),
    ],
)
def test_bad_requests_are_400_with_a_message(graph_url, body, fragment):
    r = httpx.post(f"{graph_url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert fragment in err["message"]


def test_prompt_longer_than_the_window_is_400(graph_url):
    huge = "word " * 9000
    r = httpx.post(
        f"{graph_url}/v1/chat/completions",
        json={"model": "smollm2", "messages": [{"role": "user", "content": huge}]},
        timeout=60,
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_unknown_path_is_404_envelope(graph_url):
    r = httpx.get(f"{graph_url}/v1/nothing-here")
    assert r.status_code == 404
    assert "error" in r.json()


def test_models_list_and_lookup_with_slash(graph_url):
    client = openai.OpenAI(base_url=f"{graph_url}/v1", api_key="unused")
    ids = [m.id for m in client.models.list()]
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in ids and "smollm2" in ids
    model = client.models.retrieve("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert model.id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert httpx.get(f"{graph_url}/v1/models/nope/nope").status_code == 404


@pytest.mark.parametrize("prefix", ["", "/v1"])
def test_tokenize_detokenize_round_trip(graph_url, tokenizer, prefix):
    r = httpx.post(f"{graph_url}{prefix}/tokenize", json={"prompt": "Hello agents", "add_special_tokens": False})
    body = r.json()
    assert body["tokens"] == tokenizer.encode("Hello agents", add_special_tokens=False)
    assert body["count"] == len(body["tokens"]) and body["max_model_len"] == 8192
    back = httpx.post(f"{graph_url}{prefix}/detokenize", json={"tokens": body["tokens"]}).json()
    assert back == {"prompt": "Hello agents"}


def test_detokenize_rejects_out_of_range_ids(graph_url):
    r = httpx.post(f"{graph_url}/detokenize", json={"tokens": [10**9]})
    assert r.status_code == 400


def test_health_and_metrics(graph_url):
    assert httpx.get(f"{graph_url}/health").status_code == 200
    httpx.post(
        f"{graph_url}/v1/chat/completions",
        json={"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    text = httpx.get(f"{graph_url}/metrics").text
    assert 'agentserve_requests_total{api="chat"' in text
    assert "agentserve_time_to_first_token_seconds_bucket" in text
    assert "agentserve_cached_token_ratio" in text
