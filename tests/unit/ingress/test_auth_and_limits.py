"""API keys, per-key limits, body limits and the error boundary, on a small ASGI app (no Ray)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentserve.config import LimitsSpec, ServeArgs
from agentserve.protocol.errors import RequestError
from agentserve.ingress.middleware.auth import AuthMiddleware, KeySet, current_identity, hash_key, keys_from_env, presented_key
from agentserve.ingress.errors import Envelope, ErrorEnvelopes
from agentserve.ingress.middleware.faults import ErrorBoundaryMiddleware, as_request_error
from agentserve.ingress.middleware.limits import Limits, KeyLimiter, KeyLimitsMiddleware, check_body

KEY = "sk-test-123"


def _anthropic_envelope(err: RequestError) -> dict:
    return {"type": "error", "error": {"type": f"{err.kind}_error", "message": err.message}}


ENVELOPES = ErrorEnvelopes(
    {"/v1/messages": Envelope(_anthropic_envelope, lambda e: 529 if e.kind == "overloaded" else e.status)}
)


def make_app(limits: LimitsSpec | None = None) -> FastAPI:
    app = FastAPI()
    gate = asyncio.Event()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        if request.headers.get("x-wait"):
            await gate.wait()
        return JSONResponse({"who": current_identity()})

    @app.post("/v1/messages")
    async def messages():
        return JSONResponse({"who": current_identity()})

    @app.get("/health")
    async def health():
        return JSONResponse({})

    @app.get("/boom")
    async def boom():
        raise KeyError("bug")

    app.state.gate = gate
    app.add_middleware(KeyLimitsMiddleware, limiter=KeyLimiter(Limits(limits or LimitsSpec())), envelopes=ENVELOPES,
                       identity=current_identity)
    app.add_middleware(AuthMiddleware, keys=KeySet([hash_key(KEY)]), envelopes=ENVELOPES)
    app.add_middleware(ErrorBoundaryMiddleware, envelopes=ENVELOPES)
    return app


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t")


def run(coro):
    return asyncio.run(coro)


def test_key_digests_only_in_config():
    ServeArgs(api_keys=(hash_key(KEY),))
    with pytest.raises(ValueError, match="sha256"):
        ServeArgs(api_keys=(KEY,))
    assert keys_from_env({"AGENTSERVE_API_KEYS": " a, b ,,"}) == (hash_key("a"), hash_key("b"))


def test_presented_key_forms():
    assert presented_key([(b"x-api-key", b"k1")]) == "k1"
    assert presented_key([(b"Authorization", b"Bearer k2")]) == "k2"
    assert presented_key([(b"authorization", b"bearer   k3 ")]) == "k3"
    assert presented_key([(b"authorization", b"Basic abc")]) is None
    assert presented_key([]) is None
    keys = KeySet([hash_key("k1")])
    assert keys.accepts("k1") and not keys.accepts("k2") and not keys.accepts(None)


def test_missing_or_wrong_key_is_401_in_the_paths_envelope():
    async def go():
        async with client(make_app()) as c:
            r1 = await c.post("/v1/chat/completions", json={})
            r2 = await c.post("/v1/messages", json={}, headers={"x-api-key": "wrong"})
            r3 = await c.get("/health")
            r4 = await c.post("/v1/chat/completions", json={}, headers={"authorization": f"Bearer {KEY}"})
            r5 = await c.post("/v1/messages", json={}, headers={"x-api-key": KEY})
            return r1, r2, r3, r4, r5

    r1, r2, r3, r4, r5 = run(go())
    assert r1.status_code == 401 and r1.json()["error"]["type"] == "authentication_error"
    assert r2.status_code == 401 and r2.json()["type"] == "error"
    assert r2.json()["error"]["type"] == "authentication_error"
    assert r3.status_code == 200
    # Both header forms are the same caller.
    assert r4.json()["who"] == r5.json()["who"] == hash_key(KEY)


def test_per_key_concurrency_is_429_with_retry_after_and_released_after_the_response():
    app = make_app(LimitsSpec(max_concurrent_per_key=1))

    async def go():
        async with client(app) as c:
            auth = {"x-api-key": KEY}
            first = asyncio.create_task(c.post("/v1/chat/completions", json={}, headers={**auth, "x-wait": "1"}))
            await asyncio.sleep(0.05)
            second = await c.post("/v1/chat/completions", json={}, headers=auth)
            app.state.gate.set()
            r1 = await first
            third = await c.post("/v1/chat/completions", json={}, headers=auth)
            return r1, second, third

    r1, second, third = run(go())
    assert r1.status_code == 200 and third.status_code == 200
    assert second.status_code == 429
    assert second.headers["retry-after"] == "1" and second.headers["x-should-retry"] == "true"
    assert second.json()["error"]["code"] == "concurrency_limit_exceeded"


def test_token_bucket_rate_limit():
    now = [0.0]
    limiter = KeyLimiter(Limits(LimitsSpec(requests_per_minute_per_key=60, burst_per_key=2)), clock=lambda: now[0])
    held = [limiter.acquire("a"), limiter.acquire("a")]
    assert all(held)
    for h in held:
        limiter.release(h)
    with pytest.raises(RequestError) as exc:
        limiter.acquire("a")
    assert exc.value.kind == "rate_limit" and exc.value.retry_after == pytest.approx(1.0)
    assert limiter.acquire("b")  # another key has its own bucket
    now[0] = 1.0
    assert limiter.acquire("a")
    assert not KeyLimiter(Limits()).acquire("a")  # no limits configured: nothing held


def test_rate_limit_429_in_anthropic_envelope():
    app = make_app(LimitsSpec(requests_per_minute_per_key=1, burst_per_key=1))

    async def go():
        async with client(app) as c:
            return [await c.post("/v1/messages", json={}, headers={"x-api-key": KEY}) for _ in range(2)]

    ok, limited = run(go())
    assert ok.status_code == 200 and limited.status_code == 429
    assert limited.json()["type"] == "error" and int(limited.headers["retry-after"]) >= 59


def test_error_boundary_turns_bugs_and_dead_replicas_into_clean_errors():
    async def go():
        async with client(make_app()) as c:
            return await c.get("/boom", headers={"x-api-key": KEY})

    r = run(go())
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert "bug" not in r.text  # internals are logged, not sent
    from ray.exceptions import ActorDiedError
    from ray.serve.exceptions import BackPressureError

    for exc in (ActorDiedError(), BackPressureError(num_queued_requests=5, max_queued_requests=5)):
        err = as_request_error(exc)
        assert err.kind == "overloaded" and err.retry_after


@pytest.mark.parametrize(
    "body, kind",
    [
        ({"messages": [{}] * 11}, "invalid_request"),
        ({"tools": [{}] * 4}, "invalid_request"),
        ({"messages": ["x" * 101]}, "too_large"),
        ({"a": [[[[[[[[[[[[1]]]]]]]]]]]]}, "invalid_request"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"a": {"b": {"c": {"d": {}}}}}}}]}, "invalid_request"),
        ({"tools": [{"name": "f", "input_schema": {"a": {"b": {"c": {"d": {}}}}}}]}, "invalid_request"),
    ],
)
def test_body_limits(body, kind):
    spec = LimitsSpec(max_messages=10, max_tools=3, max_string_chars=100, max_json_depth=10, max_tool_schema_depth=4)
    with pytest.raises(RequestError) as exc:
        check_body(body, spec)
    assert exc.value.kind == kind


def test_body_within_limits_passes():
    check_body({"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "f", "input_schema": {"type": "object"}}]}, LimitsSpec())


# -- the admin routes' own credential (issue 29) -------------------------------------------------------------------

ADMIN = "admin-secret"


def _admin_app(api_keys: list[str], admin_keys: list[str]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/admin/adapters")
    async def load():
        return JSONResponse({"loaded": True})

    @app.post("/v1/chat/completions")
    async def chat():
        return JSONResponse({"who": current_identity()})

    app.add_middleware(AuthMiddleware, keys=KeySet(map(hash_key, api_keys)), envelopes=ENVELOPES,
                       admin=KeySet(map(hash_key, admin_keys)))  # fmt: skip
    return app


def _post(app: FastAPI, path: str, key: str | None) -> httpx.Response:
    async def go() -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.post(path, json={}, headers=headers)

    return asyncio.run(go())


@pytest.mark.parametrize("api_keys", [[], [KEY]])
def test_the_admin_route_is_not_there_without_an_admin_credential(api_keys):
    app = _admin_app(api_keys, [])
    for key in (None, KEY, ADMIN):  # with no keys at all (make serve) as with API keys: nobody reaches it
        r = _post(app, "/v1/admin/adapters", key)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error", (key, r.text)


@pytest.mark.parametrize("api_keys", [[], [KEY]])
def test_only_an_admin_key_opens_the_admin_route(api_keys):
    app = _admin_app(api_keys, [ADMIN])
    assert _post(app, "/v1/admin/adapters", ADMIN).json() == {"loaded": True}
    for key in (None, KEY, "guess"):
        r = _post(app, "/v1/admin/adapters", key)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (key, r.text)
    if api_keys:  # and an admin key is no API key
        assert _post(app, "/v1/chat/completions", ADMIN).status_code == 401
        assert _post(app, "/v1/chat/completions", KEY).status_code == 200


def test_admin_keys_are_digests_and_come_from_their_own_env_var():
    assert keys_from_env({"AGENTSERVE_ADMIN_KEYS": "a, b"}, var="AGENTSERVE_ADMIN_KEYS") == (hash_key("a"), hash_key("b"))
    assert keys_from_env({"AGENTSERVE_ADMIN_KEYS": "a"}) == ()  # not an API key
    with pytest.raises(ValueError, match="admin.keys"):
        ServeArgs(admin={"keys": ["plain-key"]})
