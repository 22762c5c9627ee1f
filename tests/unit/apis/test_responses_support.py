"""Sealing, request-body decompression, the response store and the Codex catalog shape."""

from __future__ import annotations

import gzip
import zlib

import pytest
import zstandard

from agentserve.apis.codex.models import etag, models_body
from agentserve.apis.models import Catalog
from agentserve.apis.origin import origin_after
from agentserve.apis.responses.sealing import SealedReasoning, SealError, Sealer
from agentserve.apis.responses.store import ResponseStore, StoredResponse
from agentserve.config import ModelProfile, ModelSpec
from agentserve.protocol.errors import RequestError
from agentserve.ingress.middleware.compression import decode_body
from tests.support.keys import signing_key


def test_seal_round_trip_and_rejections():
    a, b = Sealer(signing_key("shared")), Sealer(signing_key("shared"))
    item = SealedReasoning("exact text\n with ü", "m", "resp_1", 3)
    origin = origin_after("caller", ())
    blob = a.seal(item, origin)
    assert b.open(blob, origin) == item  # any replica with the shared key opens it
    assert a.seal(item, origin) != blob  # fresh nonce each time
    with pytest.raises(SealError):
        Sealer(signing_key("other")).open(blob, origin)
    for bad in (blob[:-2], blob[:10], "!!", blob[:30] + ("A" if blob[30] != "A" else "B") + blob[31:]):
        with pytest.raises(SealError):
            a.open(bad, origin)


@pytest.mark.parametrize(
    "encoding, pack",
    [
        ("zstd", lambda b: zstandard.ZstdCompressor(level=3).compress(b)),
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some clients send
        ("identity", lambda b: b),
        (None, lambda b: b),
    ],
)
def test_decode_body(encoding, pack):
    assert decode_body(pack(b'{"a": 1}'), encoding) == b'{"a": 1}'


def test_decode_body_stacked_and_errors():
    body = b"x" * 100
    assert decode_body(zstandard.ZstdCompressor().compress(gzip.compress(body)), "gzip, zstd") == body
    with pytest.raises(RequestError) as exc:
        decode_body(b"x", "br")
    assert exc.value.status == 415
    with pytest.raises(RequestError) as exc:
        decode_body(gzip.compress(body)[:-5], "gzip")
    assert exc.value.status == 400
    with pytest.raises(RequestError) as exc:
        decode_body(gzip.compress(b"0" * 2000), "gzip", cap=1000)
    assert exc.value.status == 413
    with pytest.raises(RequestError) as exc:
        decode_body(zstandard.ZstdCompressor().compress(b"0" * 2000), "zstd", cap=1000)
    assert exc.value.status == 413


def test_store_bounds_ttl_and_owner():
    now = [0.0]
    store = ResponseStore(max_entries=2, max_bytes=10_000, ttl_s=10, clock=lambda: now[0])
    entry = lambda owner: StoredResponse(owner=owner, response={"id": "x"}, history=[{"type": "message"}])  # noqa: E731
    store.put("a", entry("o1"))
    store.put("b", entry("o1"))
    assert store.get("a", "o2") is None and store.get("a", "o1") is not None  # a is now most recent
    store.put("c", entry("o1"))
    assert store.get("b", "o1") is None and len(store) == 2  # LRU evicted b
    now[0] = 11
    assert store.get("a", "o1") is None and len(store) == 0  # expired
    assert not store.put("big", StoredResponse("o", {"x": "y" * 20_000}, []))
    store.put("d", entry("o1"))
    assert not store.delete("d", "o2") and store.delete("d", "o1") and store.bytes == 0


def test_codex_catalog_entries_and_alias_resolution():
    spec = ModelSpec(id="org/model", aliases=("gpt-5.5",), profile=ModelProfile(shell_type="default"))
    body = models_body([spec])
    assert [m["slug"] for m in body["models"]] == ["org/model", "gpt-5.5"]
    assert [m["visibility"] for m in body["models"]] == ["list", "hide"]
    assert body["models"][1]["shell_type"] == "default"
    assert etag(body) == etag(models_body([spec]))
    catalog = Catalog([spec])
    assert catalog.resolve("openai/openai/gpt-5.5") is spec and catalog.resolve("x/org/model") is spec
    with pytest.raises(RequestError):
        catalog.resolve("openai/gpt-6")
