"""POST /v1/admin/adapters without Ray: the wire model, the Router's registry of run-time adapters, and the
handler's load across replicas against fake deployment handles (tests/integration/test_runtime_adapters.py runs
the same route on a real graph)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from agentserve.serve.deployments.router_calls import RouterCalls
from agentserve.apis.admin_adapters import LoadAdapterRequest
from agentserve.apis.models import Catalog
from agentserve.config import LoraAdapterSpec, ModelSpec, ServeArgs
from agentserve.protocol.cluster import AdapterLoadResult, ModelAdapters
from agentserve.protocol.errors import RequestError
from tests.unit.fake_handles import Method
from agentserve.serve.adapter_registry import RuntimeAdapters
from agentserve.ingress.context import IngressContext
from agentserve.ingress.app import ROUTE_ENVELOPES
from agentserve.ingress.handlers.admin_adapters import AdapterAdmin

PATH = "/v1/admin/adapters"
MODELS = (
    ModelSpec(id="base/a", aliases=("a",), adapters=(LoraAdapterSpec(id="declared", path="/d"),)),
    ModelSpec(id="base/b", aliases=("b",)),
)


class FakeRouter:
    """The Router's admin surface over the real registry; `replicas` per model as the Router reports them."""

    def __init__(self, replicas: dict[str, list[str]]) -> None:
        self.registry = RuntimeAdapters(MODELS)
        self.live = replicas

        async def claim(model: str, adapter: LoraAdapterSpec) -> None:
            self.registry.claim(model, adapter)

        async def commit(model: str, adapter_id: str) -> None:
            self.registry.commit(model, adapter_id)

        async def release(model: str, adapter_id: str) -> None:
            self.registry.release(model, adapter_id)

        async def adapters(model: str | None = None, pending: bool = False) -> tuple[ModelAdapters, ...]:
            return self.registry.listing(model, pending=pending)

        async def replicas_of(model: str) -> dict[str, int]:
            return {r: 0 for r in self.live.get(model, [])}

        self.claim_adapter, self.commit_adapter = Method(claim), Method(commit)
        self.release_adapter, self.adapters, self.replicas = Method(release), Method(adapters), Method(replicas_of)


class FakeEngine:
    """An Engine deployment: `behaviour[rid]` is "ok", an error message, or "elsewhere" (Serve sent the pinned
    call to another replica, as when the asked one is gone)."""

    def __init__(self, model: str, behaviour: dict[str, str]) -> None:
        self.behaviour = behaviour
        self.loaded: dict[str, list[str]] = {rid: [] for rid in behaviour}

        async def load(adapter: LoraAdapterSpec, route: Any) -> AdapterLoadResult:
            rid = route.replica_id
            what = self.behaviour[rid]
            if what == "elsewhere":
                rid = next(r for r, b in self.behaviour.items() if b == "ok")
            if what in ("ok", "elsewhere"):
                self.loaded[rid].append(adapter.id)
                return AdapterLoadResult(rid, model, tuple(self.loaded[rid]), loaded=True)
            return AdapterLoadResult(rid, model, tuple(self.loaded[rid]), error=what)

        self.load_adapter = Method(load)


def _ctx(router: FakeRouter, engines: dict[str, FakeEngine]) -> IngressContext:
    args = ServeArgs(models=MODELS, admin={"adapter_root": "/"})  # any absolute path; tests below narrow it
    path = SimpleNamespace(router=router, routers=RouterCalls(router), unary_engines=engines)
    return IngressContext(args=args, catalog=Catalog(args.resolve_catalog().models), path=path, preprocessor=None)


def _request(body: Any) -> Request:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    scope = {"type": "http", "method": "POST", "path": PATH, "query_string": b"",
             "headers": [(b"content-type", b"application/json")]}  # fmt: skip
    return Request(scope, receive)


def _load(ctx: IngressContext, body: Any) -> dict[str, Any]:
    return orjson.loads(asyncio.run(AdapterAdmin(ctx).load(_request(body))).body)


def _refused(ctx: IngressContext, body: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(RequestError) as info:
        asyncio.run(AdapterAdmin(ctx).load(_request(body)))
    resp = ROUTE_ENVELOPES.response(PATH, info.value)
    return resp.status_code, orjson.loads(resp.body)["error"]


def _setup(behaviour: dict[str, str]) -> tuple[IngressContext, FakeRouter, FakeEngine]:
    router = FakeRouter({"base/a": [r for r, b in behaviour.items() if b != "gone"]})
    engine = FakeEngine("base/a", {r: b for r, b in behaviour.items() if b != "gone"})
    return _ctx(router, {"base/a": engine, "base/b": FakeEngine("base/b", {})}), router, engine


# -- the handler -------------------------------------------------------------------------------------------------


def test_a_load_reaches_every_replica_then_is_served_under_its_names():
    ctx, router, engine = _setup({"r1": "ok", "r2": "ok"})
    body = _load(ctx, {"model": "a", "id": "pirate", "path": "/p", "aliases": ["arr"]})
    assert body["id"] == "pirate" and body["parent"] == "base/a" and body["replicas"] == ["r1", "r2"]
    assert engine.loaded == {"r1": ["pirate"], "r2": ["pirate"]}
    assert [c[1].replica_id for c in engine.load_adapter.calls] == ["r1", "r2"]  # each call pinned to its replica
    for name in ("pirate", "arr"):
        served = ctx.catalog.lookup(name)
        assert served.model.id == "base/a" and served.adapter is not None and served.adapter.id == "pirate"
    assert [s.id for s in router.registry.for_model("base/a")] == ["pirate"]  # what later replicas load
    card = next(c for c in ctx.catalog.list_body()["data"] if c["id"] == "arr")
    assert card["root"] == "pirate" and card["parent"] == "base/a"


# The route's bytes, recorded before the Router and engine calls became typed messages (git 0833738); a failed
# load no longer carries the engine's own words (issue 29).
_GOLDEN = [
    ({"r1": "ok", "r2": "ok"}, {"model": "a", "id": "pirate", "path": "/p", "aliases": ["arr"]}, 200,
     '{"object":"model","id":"pirate","parent":"base/a","path":"/p","aliases":["arr"],"replicas":["r1","r2"]}'),
    ({"r2": "ok", "r1": "ok", "r3": "ok"}, {"model": "base/a", "id": "x", "path": "/x"}, 200,
     '{"object":"model","id":"x","parent":"base/a","path":"/x","aliases":[],"replicas":["r1","r2","r3"]}'),
    ({"r1": "ok", "r2": "cannot load: bad"}, {"model": "a", "id": "pirate", "path": "/p"}, 400,
     '{"error":{"message":"cannot load LoRA adapter \'pirate\' on base/a: replica r2: the engine refused it '
     '(the reason is in that replica\'s log). It was loaded on r1 before the failure and stays inert there (not '
     'served).","type":"invalid_request_error","param":"path","code":"adapter_load_failed"}}'),
    ({"r1": "gone"}, {"model": "a", "id": "pirate", "path": "/p"}, 503,
     '{"error":{"message":"no engine replica of base/a is running: load the adapter once one is",'
     '"type":"server_error","param":null,"code":null}}'),
]  # fmt: skip


@pytest.mark.parametrize(("behaviour", "body", "status", "raw"), _GOLDEN)
def test_the_route_answers_the_same_bytes_as_before(behaviour, body, status, raw):
    ctx, _, _ = _setup(behaviour)
    try:
        resp = asyncio.run(AdapterAdmin(ctx).load(_request(body)))
    except RequestError as err:
        resp = ROUTE_ENVELOPES.response(PATH, err)
    assert (resp.status_code, resp.body.decode()) == (status, raw)


def test_a_failure_on_one_replica_serves_nothing_and_names_where_it_loaded():
    ctx, router, engine = _setup({"r1": "ok", "r2": "cannot load LoRA adapter 'pirate': no adapter_config.json"})
    status, err = _refused(ctx, {"model": "base/a", "id": "pirate", "path": "/bad"})
    assert status == 400 and err["type"] == "invalid_request_error" and err["code"] == "adapter_load_failed"
    assert "r2" in err["message"]
    assert "adapter_config.json" not in err["message"]  # the engine's words stay in its log
    assert "loaded on r1" in err["message"]
    with pytest.raises(RequestError):
        ctx.catalog.lookup("pirate")
    assert router.registry.for_model("base/a", pending=True) == []  # the names are free again
    engine.behaviour["r2"] = "ok"
    assert _load(ctx, {"model": "base/a", "id": "pirate", "path": "/good"})["replicas"] == ["r1", "r2"]


def test_a_replica_that_left_during_the_load_is_skipped():
    ctx, router, engine = _setup({"r1": "ok", "r2": "elsewhere"})

    async def r2_leaves(adapter: LoraAdapterSpec, route: Any) -> AdapterLoadResult:
        router.live["base/a"] = ["r1"]
        return await original(adapter, route)

    original = engine.load_adapter.fn
    engine.load_adapter.fn = r2_leaves
    assert _load(ctx, {"model": "a", "id": "pirate", "path": "/p"})["replicas"] == ["r1"]


def test_a_replica_that_never_answers_its_pinned_calls_fails_the_load(monkeypatch):
    async def no_wait(_: float) -> None:
        return None

    monkeypatch.setattr("agentserve.ingress.handlers.admin_adapters.asyncio.sleep", no_wait)
    ctx, router, _ = _setup({"r1": "ok", "r2": "elsewhere"})  # r2 stays registered but Serve never reaches it
    status, err = _refused(ctx, {"model": "a", "id": "pirate", "path": "/p"})
    assert status == 400 and "answered by other replicas" in err["message"]
    assert router.registry.for_model("base/a", pending=True) == []


def test_a_replica_that_registers_during_the_load_gets_it_too():
    ctx, router, engine = _setup({"r1": "ok", "r2": "ok"})
    router.live["base/a"] = ["r1"]  # r2 is still starting when the load begins
    original = engine.load_adapter.fn

    async def r2_joins(adapter: LoraAdapterSpec, route: Any) -> AdapterLoadResult:
        router.live["base/a"] = ["r1", "r2"]
        return await original(adapter, route)

    engine.load_adapter.fn = r2_joins
    assert _load(ctx, {"model": "a", "id": "pirate", "path": "/p"})["replicas"] == ["r1", "r2"]
    assert engine.loaded["r2"] == ["pirate"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"model": "nope", "id": "x", "path": "/p"}, 404, "model_not_found"),
        ({"model": "a", "id": "declared", "path": "/p"}, 400, "adapter_exists"),  # a declared adapter's id
        ({"model": "a", "id": "x", "path": "/p", "aliases": ["b"]}, 400, "adapter_exists"),  # another model's alias
        ({"model": "declared", "id": "x", "path": "/p"}, 400, None),  # an adapter is no base model
    ],
)
def test_names_are_checked_before_any_replica_is_asked(body, status, code):
    ctx, _, engine = _setup({"r1": "ok"})
    got, err = _refused(ctx, body)
    assert (got, err["code"]) == (status, code), err
    assert engine.load_adapter.calls == []


def test_no_running_replica_is_a_503_and_frees_the_names():
    ctx, router, _ = _setup({"r1": "gone"})
    status, err = _refused(ctx, {"model": "a", "id": "pirate", "path": "/p"})
    assert status == 503 and "no engine replica" in err["message"]
    assert router.registry.for_model("base/a", pending=True) == []


def test_another_ingress_replica_learns_a_run_time_adapter_on_a_miss():
    ctx, router, _ = _setup({"r1": "ok"})
    _load(ctx, {"model": "a", "id": "pirate", "path": "/p", "aliases": ["arr"]})
    other = _ctx(router, ctx.path.unary_engines)  # its own catalog, built from the config only
    assert asyncio.run(other.lookup("arr")).adapter.id == "pirate"
    calls = len(router.adapters.calls)
    assert asyncio.run(other.lookup("pirate")).model.id == "base/a"
    assert len(router.adapters.calls) == calls  # cached: a known name costs no Router call
    with pytest.raises(RequestError) as info:
        asyncio.run(other.lookup("never-loaded"))
    assert info.value.kind == "not_found"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_field = st.one_of(_json, st.sampled_from(["a", "base/a", "pirate", "x y", "", "declared", "/p"]))
_body = st.one_of(
    _json,
    st.fixed_dictionaries({"model": _field, "id": _field, "path": _field},
                          optional={"aliases": st.one_of(_json, st.lists(_field, max_size=3)), "extra": _json}),
    st.binary(max_size=20),
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(body=_body)
def test_any_body_is_loaded_or_refused_in_openais_envelope(body):
    ctx, _, _ = _setup({"r1": "ok"})
    try:
        out = _load(ctx, body)
    except RequestError as err:
        status, payload = ROUTE_ENVELOPES.response(PATH, err).status_code, orjson.loads(ROUTE_ENVELOPES.response(PATH, err).body)
        assert status in (400, 404), (status, payload)
        assert payload["error"]["type"] in ("invalid_request_error", "not_found_error") and payload["error"]["message"]
    else:
        assert ctx.catalog.lookup(out["id"]).adapter is not None


# -- the wire model and the registry ------------------------------------------------------------------------------


def test_the_wire_model_refuses_unknown_fields_blank_and_repeated_names():
    ok = LoadAdapterRequest.model_validate({"model": "a", "id": "x", "path": "/p", "aliases": ["y"]})
    assert ok.spec() == LoraAdapterSpec(id="x", path="/p", aliases=("y",))
    for bad in (
        {"model": "a", "id": "x", "path": "/p", "rank": 8},
        {"model": "a", "id": "", "path": "/p"},
        {"model": "a", "id": "x y", "path": "/p"},
        {"model": "a", "id": "x", "path": "/p", "aliases": ["x"]},
        {"model": "a", "id": "x", "path": "/p", "aliases": [" "]},
        {"model": "a", "id": "x"},
    ):
        with pytest.raises(ValueError):
            LoadAdapterRequest.model_validate(bad)


_names = st.sampled_from(["a", "b", "declared", "p", "q", "r", "s"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["base/a", "base/b"]), _names, st.lists(_names, max_size=2, unique=True),
                          st.sampled_from(["commit", "release", "pending"])), max_size=8))  # fmt: skip
def test_a_name_is_held_by_one_adapter_at_most(loads):
    reg = RuntimeAdapters(MODELS)
    held = {n for m in MODELS for n in m.served_names()}
    for model, adapter_id, aliases, outcome in loads:
        aliases = [a for a in aliases if a != adapter_id]
        spec = LoraAdapterSpec(id=adapter_id, path="/p", aliases=tuple(aliases))
        free = not (set(spec.names()) & held)
        try:
            reg.claim(model, spec)
        except RequestError as err:
            assert not free and err.code == "adapter_exists"
            continue
        assert free
        if outcome == "release":
            reg.release(model, adapter_id)
        else:
            held |= set(spec.names())
            if outcome == "commit":
                reg.commit(model, adapter_id)
    runtime = [n for m in ("base/a", "base/b") for s in reg.for_model(m, pending=True) for n in s.names()]
    assert len(runtime) == len(set(runtime))


def test_pending_loads_come_after_committed_ones_for_a_starting_replica():
    reg = RuntimeAdapters(MODELS)
    for i in ("p", "q", "r"):
        reg.claim("base/a", LoraAdapterSpec(id=i, path=f"/{i}"))
    reg.commit("base/a", "q")
    assert [s.id for s in reg.for_model("base/a")] == ["q"]
    assert [s.id for s in reg.for_model("base/a", pending=True)] == ["q", "p", "r"]
    assert reg.committed() == {"base/a": [LoraAdapterSpec(id="q", path="/q")]}
    with pytest.raises(RequestError) as info:
        reg.claim("base/x", LoraAdapterSpec(id="z", path="/z"))
    assert info.value.kind == "not_found"


def test_a_restarted_router_relearns_adapters_from_the_replicas_that_hold_them():
    reg = RuntimeAdapters(MODELS)  # a fresh Router: it knows only the config
    held = LoraAdapterSpec(id="pirate", path="/p", aliases=("arr",))
    assert reg.adopt("base/a", held)
    assert not reg.adopt("base/a", held)  # the next replica reporting it changes nothing
    assert reg.committed() == {"base/a": [held]}
    assert not reg.adopt("base/b", LoraAdapterSpec(id="other", path="/o", aliases=("arr",)))  # a clash: left alone
    assert not reg.adopt("base/a", LoraAdapterSpec(id="declared", path="/d"))  # declared: not a run-time adapter
    reg.claim("base/a", LoraAdapterSpec(id="loading", path="/l"))
    assert not reg.adopt("base/a", LoraAdapterSpec(id="loading", path="/l"))  # a load under way stays pending
    assert [s.id for s in reg.for_model("base/a")] == ["pirate"]
    with pytest.raises(RequestError):  # and a relearnt id is refused like any served one
        reg.claim("base/b", LoraAdapterSpec(id="pirate", path="/x"))


# -- what an admin key may name (issue 29) -------------------------------------------------------------------------


def _rooted(root: str | None) -> tuple[IngressContext, FakeEngine]:
    ctx, _, engine = _setup({"r1": "ok"})
    args = ServeArgs(models=MODELS, admin={"adapter_root": root})
    return IngressContext(args=args, catalog=ctx.catalog, path=ctx.path, preprocessor=None), engine


def test_a_path_outside_the_adapter_root_or_a_hub_id_never_reaches_an_engine(tmp_path):
    root, outside = tmp_path / "adapters", tmp_path / "secrets"
    (root / "good").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)  # a link inside the root that leads out of it
    ctx, engine = _rooted(str(root))
    for path in ("HuggingFaceTB/some-adapter", "good", f"{root}/../secrets", f"{root}/escape", str(outside),
                 str(root), "/etc"):  # fmt: skip
        status, err = _refused(ctx, {"model": "a", "id": "x", "path": path})
        assert (status, err["code"], err["param"]) == (400, "adapter_path_refused", "path"), path
    assert engine.load_adapter.calls == []
    body = _load(ctx, {"model": "a", "id": "x", "path": f"{root}/./good"})
    assert body["path"] == str((root / "good").resolve())  # what the engines were given: the resolved path
    assert engine.load_adapter.calls[0][0].path == str((root / "good").resolve())


def test_without_an_adapter_root_run_time_loads_are_refused():
    ctx, engine = _rooted(None)
    status, err = _refused(ctx, {"model": "a", "id": "x", "path": "/adapters/x"})
    assert (status, err["code"]) == (400, "adapter_root_unset") and "admin.adapter_root" in err["message"]
    assert engine.load_adapter.calls == []


def test_an_engine_error_is_logged_not_echoed(caplog):
    secret = "cannot read /models/private/adapter_config.json: {'token': 'hf_abc'}"
    ctx, _, _ = _setup({"r1": secret})
    status, err = _refused(ctx, {"model": "a", "id": "x", "path": "/p"})
    assert status == 400 and err["code"] == "adapter_load_failed" and "r1" in err["message"]
    assert "hf_abc" not in err["message"] and "/models/private" not in err["message"]
    assert secret in caplog.text  # the operator still finds it


@pytest.mark.parametrize(
    "name",
    [
        "hosted_vllm/a", "openai/base/a", "openai/declared", "x/y/b",  # reach a catalog name by suffix today
        "claude-sonnet-4-5", "claude-opus-4-1-20250805", "haiku", "sonnet", "anthropic/claude-x",  # Claude Code's
        "gpt-5.5", "openai/gpt-5-codex", "o3", "o4-mini", "codex-mini-latest", "GPT-4o",  # Codex's and OpenClaw's
    ],
)
def test_a_name_that_resolves_today_or_that_harnesses_send_is_refused(name):
    ctx, _, engine = _setup({"r1": "ok"})
    for body in ({"model": "a", "id": name, "path": "/p"}, {"model": "a", "id": "fresh", "path": "/p", "aliases": [name]}):
        status, err = _refused(ctx, body)
        assert status == 400 and err["code"] in ("adapter_exists", "adapter_name_reserved"), (body, err)
    assert engine.load_adapter.calls == []
    with pytest.raises(RequestError):  # and nothing got served under it
        ctx.catalog.lookup("fresh")


def test_a_loaded_adapter_cannot_be_shadowed_by_a_prefixed_name():
    ctx, _, _ = _setup({"r1": "ok"})
    _load(ctx, {"model": "a", "id": "pirate", "path": "/p"})
    status, err = _refused(ctx, {"model": "a", "id": "openai/pirate", "path": "/q"})
    assert (status, err["code"]) == (400, "adapter_exists") and "reach 'pirate'" in err["message"]


def test_run_time_adapters_are_capped_per_model():
    reg = RuntimeAdapters(MODELS, max_runtime=2)
    reg.claim("base/a", LoraAdapterSpec(id="p", path="/p"))
    reg.claim("base/a", LoraAdapterSpec(id="q", path="/q"))
    reg.commit("base/a", "p")
    with pytest.raises(RequestError) as info:
        reg.claim("base/a", LoraAdapterSpec(id="r", path="/r"))  # committed and pending both count
    assert info.value.code == "adapter_limit"
    reg.release("base/a", "q")  # a failed load frees its place
    reg.claim("base/a", LoraAdapterSpec(id="r", path="/r"))
    reg.claim("base/b", LoraAdapterSpec(id="s", path="/s"))  # per model
    assert ServeArgs().admin.max_runtime_adapters == 8
