"""/tokenize and /detokenize as an attacker uses them (issue 29, item 4): under the per-key limits like generation,
and /detokenize bounded to the model's window and decoded off the event loop (before: 15 MiB of ids decoded on the
loop for 4.3 s, by any key, however many at once)."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentserve.config import LimitsSpec, ModelSpec
from agentserve.ingress.errors import ErrorEnvelopes
from agentserve.ingress.handlers.tokenize import TokenizeHandler
from agentserve.ingress.middleware.faults import ErrorBoundaryMiddleware
from agentserve.ingress.middleware.limits import KeyLimiter, KeyLimitsMiddleware, Limits

MODEL = ModelSpec()


class RecordingTokenizer:
    """The real tokenizer, noting which thread each decode ran on."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.decoded_on: list[threading.Thread] = []

    def __len__(self) -> int:
        return len(self._tokenizer)

    def decode(self, ids: list[int]) -> str:
        self.decoded_on.append(threading.current_thread())
        return self._tokenizer.decode(ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def _ctx(tokenizer: Any, limits: LimitsSpec) -> Any:
    async def lookup(_name: str) -> Any:
        return SimpleNamespace(model=MODEL, id=MODEL.id)

    return SimpleNamespace(
        args=SimpleNamespace(limits=limits),
        catalog=SimpleNamespace(default=MODEL),
        lookup=lookup,
        tokenizer_for=lambda _model: tokenizer,
    )


def _app(tokenizer: Any, limits: LimitsSpec = LimitsSpec()) -> FastAPI:
    app = FastAPI()
    handler = TokenizeHandler(_ctx(tokenizer, limits))
    gate = asyncio.Event()
    for prefix in ("", "/v1"):
        app.add_api_route(f"{prefix}/detokenize", handler.detokenize, methods=["POST"])

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        await gate.wait()
        return JSONResponse({})

    @app.post("/tokenize")
    @app.post("/v1/tokenize")
    async def tokenize(request: Request):  # stands for the real route: the limits decide before any handler
        return JSONResponse({"tokens": []})

    @app.get("/v1/models")
    async def models():
        return JSONResponse({"data": []})

    app.state.gate = gate
    app.add_middleware(KeyLimitsMiddleware, limiter=KeyLimiter(Limits(limits)), envelopes=ErrorEnvelopes(),
                       identity=lambda: "key-a")  # fmt: skip
    app.add_middleware(ErrorBoundaryMiddleware, envelopes=ErrorEnvelopes())
    return app


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t")


@pytest.mark.parametrize("count, status, param", [
    (100_000, 400, "tokens"),  # past an 8K window, within the element cap: refused by the window
    (4 * 1024 * 1024 // 3, 413, None),  # ~4 MiB of ids, inside the byte caps: refused by the element cap
])  # fmt: skip
def test_detokenize_of_a_huge_list_is_refused_at_once(tokenizer, count, status, param):
    ids = [42] * count

    async def go():
        async with _client(_app(tokenizer)) as c:
            started = time.perf_counter()
            r = await c.post("/detokenize", content=orjson.dumps({"tokens": ids}), headers={"content-type": "application/json"})
            return r, time.perf_counter() - started

    r, took = asyncio.run(go())
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param
    assert str(MODEL.context_window if param else LimitsSpec().max_json_items) in err["message"]
    assert took < 2.0


def test_detokenize_of_a_full_window_decodes_off_the_loop(tokenizer):
    recording = RecordingTokenizer(tokenizer)
    ids = tokenizer.encode("the quick brown fox jumps over the lazy dog " * 1000)[: MODEL.context_window]
    assert len(ids) == MODEL.context_window

    async def go():
        async with _client(_app(recording)) as c:
            long = await c.post("/v1/detokenize", json={"tokens": ids})
            short = await c.post("/v1/detokenize", json={"tokens": ids[:8]})
            bad = await c.post("/v1/detokenize", json={"tokens": [*ids, 10**9]})
            return long, short, bad

    long, short, bad = asyncio.run(go())
    assert long.status_code == 200 and long.json()["prompt"] == tokenizer.decode(ids)
    assert short.status_code == 200 and short.json()["prompt"] == tokenizer.decode(ids[:8])
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    long_thread, short_thread = recording.decoded_on
    assert long_thread is not threading.main_thread()  # the window's worth: a worker thread
    assert short_thread is threading.main_thread()  # eight ids: inline, cheaper than the hop


def test_tokenize_and_detokenize_count_against_the_keys_concurrency(tokenizer):
    """Before, only the generation paths were limited: a key at its limit could still run tokenizer work without
    bound."""
    app = _app(tokenizer, LimitsSpec(max_concurrent_per_key=1))

    async def go():
        async with _client(app) as c:
            holding = asyncio.create_task(c.post("/v1/chat/completions", json={}))
            await asyncio.sleep(0.1)  # the key's one slot is taken
            refused = {p: await c.post(p, json={"tokens": [1, 2]}) for p in ("/tokenize", "/v1/tokenize", "/detokenize", "/v1/detokenize")}
            listing = await c.get("/v1/models")
            app.state.gate.set()
            await holding
            after = await c.post("/detokenize", json={"tokens": [1, 2]})
            return refused, listing, after

    refused, listing, after = asyncio.run(go())
    for path, r in refused.items():
        assert r.status_code == 429, (path, r.text)
        assert r.json()["error"]["code"] == "concurrency_limit_exceeded" and r.headers["retry-after"] == "1"
    assert listing.status_code == 200  # reading the catalog is not limited
    assert after.status_code == 200  # the slot came back
