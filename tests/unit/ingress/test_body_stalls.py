"""Legal-looking bodies that used to stall the ingress event loop (issue 29, item 4): decompression bombs at the
shipped caps, bodies with huge element counts anywhere in the tree, and large bodies parsed on the loop.

Before: a 1.4 KiB zstd body expanding to 16 MiB (a quarter of the old 64 MiB cap) was decompressed, parsed and
walked on the loop, 4 s and +580 MiB, and accepted; the walk counted only `messages`/`input` and `tools`."""

from __future__ import annotations

import asyncio
import gzip
import time
import tracemalloc
import zlib
from typing import Any

import httpx
import orjson
import pytest
import zstandard
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, model_validator

from agentserve.apis.anthropic import MessagesRequest
from agentserve.config import LimitsSpec
from agentserve.ingress.errors import ErrorEnvelopes
from agentserve.ingress.http import INLINE_BODY_BYTES, parse_body
from agentserve.ingress.middleware.faults import ErrorBoundaryMiddleware
from agentserve.ingress.middleware.compression import decode_body
from agentserve.ingress.middleware.limits import check_body
from agentserve.protocol.errors import RequestError

SHIPPED = LimitsSpec()
HEAD = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"metadata":{"x":['


def _dense(size: int, unit: bytes = b"{},") -> bytes:
    """A Messages body of `size` bytes whose bulk is one array of tiny values: the cheapest bytes to send that cost
    the most to parse."""
    return HEAD + unit * ((size - len(HEAD) - 8) // len(unit)) + b"0]}}"


PACK = {
    "zstd": lambda b: zstandard.ZstdCompressor(level=19).compress(b),
    "gzip": gzip.compress,
    "deflate": zlib.compress,
}


def test_the_shipped_caps_are_what_agent_bodies_need():
    from agentserve.bench import claude_code_shape

    body = orjson.dumps(claude_code_shape.body(300))  # a long Claude Code session passes with room to spare
    assert 4 * len(body) < SHIPPED.max_decompressed_bytes <= 8 * 1024 * 1024
    check_body(orjson.loads(body), SHIPPED)


@pytest.mark.parametrize("encoding", sorted(PACK))
def test_a_bomb_past_the_shipped_cap_is_a_413_at_once_without_allocating_its_size(encoding):
    bomb = PACK[encoding](_dense(16 * 1024 * 1024))
    assert len(bomb) < 64 * 1024
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(RequestError) as exc:
            decode_body(bomb, encoding, SHIPPED.max_decompressed_bytes)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert exc.value.kind == "too_large" and exc.value.status == 413
    assert time.perf_counter() - started < 1.0
    # the output stops at the cap: what is held is the cap and a chunk, never the 16 MiB it would expand to
    assert peak < SHIPPED.max_decompressed_bytes + 2 * 1024 * 1024, peak


@pytest.mark.parametrize("encoding", sorted(PACK))
def test_decompression_of_a_gigabyte_bomb_stops_at_a_small_cap(encoding):
    bomb = PACK[encoding](b"\0" * (256 * 1024 * 1024)) if encoding != "zstd" else zstandard.ZstdCompressor().compress(b"\0" * (1 << 30))
    tracemalloc.start()
    try:
        with pytest.raises(RequestError):
            decode_body(bomb, encoding, 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024 + len(bomb), peak


@pytest.mark.parametrize("encoding", sorted(PACK))
def test_a_body_just_under_the_cap_decompresses_whole(encoding):
    body = _dense(SHIPPED.max_decompressed_bytes - 16, b"0,")
    assert decode_body(PACK[encoding](body), encoding, SHIPPED.max_decompressed_bytes) == body


# -- the walk: every element counted, linear, stopped at the limit --------------------------------------------
def _blocks(n: int) -> list[dict[str, str]]:
    return [{"type": "text", "text": "a"}] * n


HUGE_ANYWHERE = {
    "content blocks of one message": {"messages": [{"role": "user", "content": _blocks(50_000)}]},
    "system blocks": {"system": _blocks(50_000), "messages": []},
    "an unknown field": {"messages": [], "x_extra": [0] * 200_000},
    "metadata": {"messages": [], "metadata": {f"k{i}": "v" for i in range(200_000)}},
    "tool_calls of one message": {"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}] * 150_000}]},
    "detokenize ids": {"tokens": list(range(200_000))},
    "a bare array": [0] * 200_000,
}


@pytest.mark.parametrize("where", sorted(HUGE_ANYWHERE))
def test_a_huge_element_count_anywhere_is_refused(where):
    """Before, only top-level `messages`/`input` and `tools` were counted: these all passed the walk."""
    with pytest.raises(RequestError) as exc:
        check_body(HUGE_ANYWHERE[where], SHIPPED)
    assert exc.value.kind == "too_large" and str(SHIPPED.max_json_items) in exc.value.message


def test_the_walk_stops_at_the_limit_in_constant_memory():
    """Four million elements: one `len` and a 413, not a stack of four million entries (before: ~1 s, +300 MiB)."""
    body = {"messages": [], "x": [[0] * 4_000_000]}
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(RequestError):
            check_body(body, SHIPPED)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 0.1 and peak < 64 * 1024


def test_the_walk_is_linear_in_a_body_at_the_limit():
    def timed(n: int) -> float:
        body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * n}]}
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            check_body(body, SHIPPED)
            best = min(best, time.perf_counter() - started)
        return best

    small, large = timed(4_000), timed(40_000)
    assert large < 30 * small + 0.01  # 10x the elements: ~10x the time, never quadratic


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=5),
    max_leaves=40,
)


def _naive(value: Any, d: int = 1) -> tuple[int, int]:
    """(elements and members, nesting depth), recursively: the reference the bounded walk must agree with."""
    if isinstance(value, dict):
        inner = [_naive(v, d + 1) for v in value.values()]
        return len(value) + sum(i for i, _ in inner), max([d, *(x for _, x in inner)])
    if isinstance(value, list):
        inner = [_naive(v, d + 1) for v in value]
        return len(value) + sum(i for i, _ in inner), max([d, *(x for _, x in inner)])
    return 0, d - 1


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(1, 30), st.integers(2, 6))
def test_the_walk_refuses_exactly_the_bodies_past_a_limit(value, max_items, max_depth):
    spec = LimitsSpec(max_json_items=max_items, max_json_depth=max_depth)
    items, depth = _naive(value)
    try:
        check_body(value, spec)
        refused = None
    except RequestError as err:
        refused = err
    assert (refused is not None) == (items > max_items or depth > max_depth), (items, depth, refused)


# -- large bodies are decoded off the event loop ----------------------------------------------------------------
class Slow(BaseModel):
    """A body whose validation takes 0.6 s without holding the GIL: stands for any heavy legal body."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _slow(self) -> "Slow":
        time.sleep(0.6)
        return self


def _app(model: type[BaseModel]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/messages")
    async def messages(request: Request):
        await parse_body(request, model, SHIPPED)
        return JSONResponse({"ok": True})

    @app.get("/health")
    async def health():
        return JSONResponse({})

    app.add_middleware(ErrorBoundaryMiddleware, envelopes=ErrorEnvelopes())  # errors in the OpenAI envelope
    return app


async def _while_posting(app: FastAPI, content: bytes, headers: dict[str, str]) -> tuple[httpx.Response, float]:
    """POST `content`, and meanwhile call /health every 5 ms: the longest time between two answers."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=30) as c:
        post = asyncio.create_task(c.post("/v1/messages", content=content, headers=headers))
        worst = 0.0
        last = time.perf_counter()
        while not post.done():
            await asyncio.sleep(0.005)
            assert (await c.get("/health")).status_code == 200
            now = time.perf_counter()
            worst, last = max(worst, now - last), now
        return await post, worst


def test_a_large_body_is_decoded_off_the_loop_and_health_keeps_answering():
    body = orjson.dumps({"messages": [{"role": "user", "content": "x" * 100}] * 1000})
    assert len(body) > INLINE_BODY_BYTES
    r, worst = asyncio.run(_while_posting(_app(Slow), body, {"content-type": "application/json"}))
    assert r.status_code == 200 and worst < 0.3, worst


def test_a_zstd_bomb_at_the_shipped_cap_is_a_413_and_health_keeps_answering():
    app = _app(MessagesRequest)
    bomb = PACK["zstd"](_dense(16 * 1024 * 1024))
    started = time.perf_counter()
    r, worst = asyncio.run(_while_posting(app, bomb, {"content-type": "application/json", "content-encoding": "zstd"}))
    assert r.status_code == 413 and time.perf_counter() - started < 2.0, r.text
    assert worst < 0.3
    # and a bomb that stays just under the cap is refused by its element count, also at once
    under = PACK["zstd"](_dense(SHIPPED.max_decompressed_bytes - 64))
    started = time.perf_counter()
    r, worst = asyncio.run(_while_posting(app, under, {"content-type": "application/json", "content-encoding": "zstd"}))
    assert r.status_code == 413 and "array elements" in r.text and time.perf_counter() - started < 3.0, r.text


def test_an_uncompressed_body_is_held_to_the_decoded_cap_as_it_arrives():
    """Before: 32 MiB were buffered, then parsed, before the 64 MiB decoded cap could apply."""
    app = _app(MessagesRequest)

    async def chunks():
        for _ in range(64):
            yield b" " * (256 * 1024)

    async def go():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post("/v1/messages", content=chunks(), headers={"content-type": "application/json"})

    assert asyncio.run(go()).status_code == 413


_docs = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(_docs, st.integers(1, 40), st.integers(1, 60), st.integers(2, 8))
def test_told_the_size_the_walk_refuses_exactly_what_it_refused(doc, strings, items, depth):
    """A document no longer than `max_string_chars` holds no string that long, so the walk told its size skips
    measuring strings: it must refuse exactly what the full walk refuses, with the same error."""
    spec = LimitsSpec(max_string_chars=strings, max_json_items=items, max_json_depth=depth)
    raw = orjson.dumps(doc)

    def outcome(size: int | None) -> tuple[str, str] | None:
        try:
            check_body(orjson.loads(raw), spec, size)
        except RequestError as err:
            return err.kind, err.message
        return None

    assert outcome(len(raw)) == outcome(None)
