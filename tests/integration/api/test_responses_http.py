"""Transport-level behaviour of the Responses endpoint: compressed bodies, malformed input, the Codex catalog."""

from __future__ import annotations

import gzip
import json
import re
import zlib

import httpx
import orjson
import pytest
import zstandard

from tests.integration.api.test_responses_events import codex_turn, raw_stream

pytestmark = pytest.mark.integration

_VOLATILE = re.compile(rb'"(?:(?:resp|fc|msg|rs)_[0-9a-f]{32}|call_[0-9a-f]{24})"|"created_at":\d+')


def _normalised(body: bytes) -> list:
    """The stream's meaning: its events with ids and times masked, each item's deltas joined (how the engine's
    tokens were grouped into chunks varies from run to run; what the client reads must not)."""
    events: list = []
    deltas: dict = {}
    for block in body.decode().strip().split("\n\n"):
        if block.startswith(":"):  # an SSE comment (keep-alive during a gap): not an event
            continue
        data = json.loads(block.split("data: ", 1)[1])
        data.pop("sequence_number", None)
        if data["type"].endswith(".delta"):
            key = (data["type"], data.get("output_index"), data.get("content_index"), data.get("summary_index"))
            if key not in deltas:
                deltas[key] = len(events)
                events.append({**data, "delta": ""})
            events[deltas[key]]["delta"] += data["delta"]
        else:
            events.append(data)
    return [_VOLATILE.sub(b'"X"', orjson.dumps(e)) for e in events]


def _post(url: str, body: bytes, encoding: str | None, path: str = "/v1/responses") -> httpx.Response:
    headers = {"content-type": "application/json"}
    if encoding:
        headers["content-encoding"] = encoding
    return httpx.post(url + path, content=body, headers=headers, timeout=60)


@pytest.mark.parametrize(
    "encoding, compress",
    [
        ("zstd", lambda b: zstandard.ZstdCompressor(level=3).compress(b)),
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
    ],
)
def test_compressed_body_gives_the_same_stream(graph_url, encoding, compress):
    body = orjson.dumps({**codex_turn("rsp-shell: list files"), "stream": True})
    _post(graph_url, body, None)  # warm the prefix cache, so both requests below see the same cached_tokens
    plain = _post(graph_url, body, None)
    packed = _post(graph_url, compress(body), encoding)
    assert plain.status_code == packed.status_code == 200
    assert _normalised(packed.content) == _normalised(plain.content)


def test_compressed_chat_completions_body(graph_url):
    body = orjson.dumps({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]})
    r = _post(graph_url, gzip.compress(body), "gzip", path="/v1/chat/completions")
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


def test_unknown_encoding_is_415(graph_url):
    r = _post(graph_url, b"xx", "br")
    assert r.status_code == 415
    assert "br" in r.json()["error"]["message"]


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "deflate"])
def test_malformed_compressed_body_is_400(graph_url, encoding):
    r = _post(graph_url, b"definitely not compressed", encoding)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_decompression_bomb_is_413(graph_url):
    bomb = zstandard.ZstdCompressor(level=3).compress(b" " * (65 * 1024 * 1024))
    r = _post(graph_url, bomb, "zstd")
    assert r.status_code == 413


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"{nope", "not valid JSON"),
        (b'{"input": "x"}', "model"),
        (b'{"model": "smollm2", "input": [{"type": "wizard"}]}', "wizard"),
        (b'{"model": "smollm2", "input": [{"type": "function_call", "name": "x"}]}', "call_id"),
        (b'{"model": "smollm2", "input": []}', "input"),
        (b'{"model": "smollm2", "input": "x", "tool_choice": {"type": "function", "name": "nope"}}', "nope"),
        (b'{"model": "smollm2", "input": [{"type": "item_reference", "id": "msg_1"}]}', "item_reference"),
    ],
)
def test_malformed_requests_are_400(graph_url, body, fragment):
    r = _post(graph_url, body, None)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]["message"]


def test_unknown_fields_are_accepted(graph_url):
    events = raw_stream(graph_url, {**codex_turn("rsp-hello"), "client_metadata": {"x": 1}, "brand_new_field": True})
    assert events[-1][0] == "response.completed"


def test_codex_models_catalog_with_etag(graph_url):
    r = httpx.get(f"{graph_url}/v1/models", params={"client_version": "0.99.0"}, timeout=5)
    assert r.status_code == 200 and r.headers["etag"]
    models = r.json()["models"]
    slugs = [m["slug"] for m in models]
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in slugs and "smollm2" in slugs
    required = {
        "slug", "display_name", "description", "supported_reasoning_levels", "shell_type", "visibility",
        "supported_in_api", "priority", "upgrade", "base_instructions", "supports_reasoning_summaries",
        "support_verbosity", "default_verbosity", "apply_patch_tool_type", "truncation_policy",
        "supports_parallel_tool_calls", "experimental_supported_tools",
    }  # fmt: skip
    for m in models:
        assert required <= m.keys()
        assert m["truncation_policy"]["mode"] in ("tokens", "bytes")
        assert m["context_window"] == 8192
    again = httpx.get(f"{graph_url}/v1/models", params={"client_version": "0.99.0"}, timeout=5)
    assert again.headers["etag"] == r.headers["etag"]
    # Other clients still get OpenAI's list shape.
    assert httpx.get(f"{graph_url}/v1/models", timeout=5).json()["object"] == "list"
