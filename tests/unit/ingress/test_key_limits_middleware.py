"""Per-key limits through the ASGI middleware, with two "ingress replicas" (two apps) sharing one state backend:
429 + retry-after across replicas, release on every exit, renewal while a request lives, and no database at all
when no per-key limit is configured."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentserve.config import LimitsSpec, StateSpec
from agentserve.ingress.middleware.limits import KeyLimiter, KeyLimitsMiddleware, Limits


def replica(limits: Limits) -> tuple[FastAPI, KeyLimiter]:
    """One ingress replica: its own app, middleware and limiter; the state backend is what replicas share."""
    app = FastAPI()
    app.state.gate = asyncio.Event()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        if request.headers.get("x-wait"):
            await app.state.gate.wait()
        if request.headers.get("x-fail"):
            raise RuntimeError("handler bug")
        return JSONResponse({"ok": True})

    @app.post("/v1/responses")
    async def stream():
        async def body():
            for i in range(1000):
                yield f"data: {i}\n\n"
                await asyncio.sleep(0.01)

        return StreamingResponse(body(), media_type="text/event-stream")

    limiter = KeyLimiter(limits)
    app.add_middleware(KeyLimitsMiddleware, limiter=limiter, identity=lambda: "key-digest")
    return app, limiter


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t")


async def settle(limiter: KeyLimiter, expected: int, timeout: float = 5.0) -> int:
    """In-flight count once releases (run in threads) have landed."""
    deadline = time.monotonic() + timeout
    while True:
        n = await asyncio.to_thread(limiter.in_flight, "key-digest")
        if n == expected or time.monotonic() > deadline:
            return n
        await asyncio.sleep(0.02)


@pytest.fixture
def shared(tmp_path) -> Limits:
    return Limits(LimitsSpec(max_concurrent_per_key=1), StateSpec(backend="sqlite", data_dir=str(tmp_path)))


def test_the_limit_is_global_across_replicas_and_released_after_the_response(shared):
    (app1, lim1), (app2, _) = replica(shared), replica(shared)

    async def go():
        async with client(app1) as c1, client(app2) as c2:
            first = asyncio.create_task(c1.post("/v1/chat/completions", headers={"x-wait": "1"}))
            while await asyncio.to_thread(lim1.in_flight, "key-digest") == 0:
                await asyncio.sleep(0.01)
            refused = await c2.post("/v1/chat/completions")  # the other replica sees the slot taken
            app1.state.gate.set()
            done = await first
            after = await c2.post("/v1/chat/completions")
            return done, refused, after

    done, refused, after = asyncio.run(go())
    assert done.status_code == 200 and after.status_code == 200
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "concurrency_limit_exceeded"


def test_released_when_the_handler_fails_and_when_the_client_leaves_mid_stream(shared):
    app, lim = replica(shared)

    async def go():
        async with client(app) as c:
            failed = await c.post("/v1/chat/completions", headers={"x-fail": "1"})
            after_failure = await settle(lim, 0)

            async def read_some():
                async with c.stream("POST", "/v1/responses") as r:
                    async for _ in r.aiter_lines():
                        pass

            reader = asyncio.create_task(read_some())
            assert await settle(lim, 1) == 1
            reader.cancel()  # the client goes away mid-stream
            with pytest.raises(asyncio.CancelledError):
                await reader
            return failed, after_failure, await settle(lim, 0)

    failed, after_failure, after_leaving = asyncio.run(go())
    assert failed.status_code == 500
    assert after_failure == 0 and after_leaving == 0


def test_a_live_request_renews_its_lease_past_the_ttl(tmp_path):
    limits = Limits(
        LimitsSpec(max_concurrent_per_key=1, lease_ttl_s=1), StateSpec(backend="sqlite", data_dir=str(tmp_path))
    )
    (app1, lim1), (app2, _) = replica(limits), replica(limits)

    async def go():
        async with client(app1) as c1, client(app2) as c2:
            first = asyncio.create_task(c1.post("/v1/chat/completions", headers={"x-wait": "1"}))
            while await asyncio.to_thread(lim1.in_flight, "key-digest") == 0:
                await asyncio.sleep(0.01)
            statuses = []
            for _ in range(5):  # 2.5 s: more than twice the lease's TTL
                await asyncio.sleep(0.5)
                statuses.append((await c2.post("/v1/chat/completions")).status_code)
            app1.state.gate.set()
            await first
            return statuses

    assert asyncio.run(go()) == [429] * 5


def test_no_per_key_limits_means_no_database_access():
    # A backend that cannot be opened: any database access on the request path would fail the request.
    limits = Limits(LimitsSpec(), StateSpec(backend="postgres", postgres_dsn="host=/nonexistent port=1 connect_timeout=1"))
    app, limiter = replica(limits)

    async def go():
        async with client(app) as c:
            return [await c.post("/v1/chat/completions") for _ in range(3)]

    assert [r.status_code for r in asyncio.run(go())] == [200, 200, 200]
    assert limiter._backend is None  # never opened
