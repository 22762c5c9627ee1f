"""The model catalog: ServeArgs.models validation, name resolution, the catalog shapes, one router per model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from ray.serve.schema import ServeDeploySchema

from agentserve.apis.codex import models as codex_models
from agentserve.apis.models import Catalog
from agentserve.config import EngineSpec, ModelSpec, ServeArgs
from agentserve.protocol import RouteRequest
from agentserve.protocol.errors import RequestError
from agentserve.routing.catalog_router import CatalogRouter
from agentserve.routing.cost import CostConfig
from agentserve.routing.kv_router import RouterConfig

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED = {"kind": "scripted", "block_size": 16, "rules": [{"reply": "hi"}]}


def _two(**extra) -> dict:
    return {
        "models": [
            {"id": "org/main-model", "aliases": ["main"]},
            {"id": "org/small", "aliases": ["haiku"], "engine": SCRIPTED, **extra},
        ]
    }


# -- ServeArgs ------------------------------------------------------------------------------------------------


def test_single_model_form_is_unchanged():
    args = ServeArgs()
    (only,) = args.resolve_catalog().models
    assert only.id == args.model.id and only.engine == args.engine
    assert args.resolve_catalog().deployment_name(only.id) == "Engine"


def test_catalog_form_gives_each_model_its_engine_and_deployment():
    args = ServeArgs.from_any({**_two(), "engine": {"kind": "scripted", "rules": [{"reply": "x"}], "block_size": 32}})
    main, small = args.resolve_catalog().models
    assert main.engine == args.engine  # no engine of its own: the shared one
    assert small.engine == EngineSpec.model_validate(SCRIPTED)
    assert [args.resolve_catalog().deployment_name(m.id) for m in (main, small)] == ["Engine-org-main-model", "Engine-org-small"]


def test_a_dumped_catalog_validates_again():
    """build_app hands every deployment the args as a JSON dict: the round trip must give the same catalog."""
    args = ServeArgs.from_any(_two(adapters=[{"id": "small-pirate", "path": "/adapters/p", "aliases": ["pirate"]}]))
    again = ServeArgs.from_any(args.model_dump(mode="json"))
    assert again.resolve_catalog().models == args.resolve_catalog().models


@pytest.mark.parametrize(
    "models, duplicate",
    [
        ([{"id": "a", "aliases": ["x"]}, {"id": "b", "aliases": ["x"]}], "'x'"),
        ([{"id": "a", "aliases": []}, {"id": "b", "aliases": ["a"]}], "'a'"),
        ([{"id": "a", "aliases": ["a"]}], "'a'"),
        ([{"id": "a", "aliases": ["x"]}, {"id": "b", "aliases": [], "adapters": [{"id": "x", "path": "/p"}]}], "'x'"),
        (
            [
                {"id": "a", "aliases": [], "adapters": [{"id": "l1", "path": "/p", "aliases": ["l"]}]},
                {"id": "b", "aliases": [], "adapters": [{"id": "l", "path": "/q"}]},
            ],
            "'l'",
        ),
    ],
)
def test_names_are_unique_across_the_catalog(models, duplicate):
    with pytest.raises(ValidationError) as err:
        ServeArgs.from_any({"models": models})
    assert duplicate in str(err.value) and "used twice" in str(err.value)


def test_default_aliases_clash_when_two_models_keep_them():
    """Both entries left with ModelSpec's default aliases: the error names the alias to change."""
    with pytest.raises(ValidationError, match="'smollm2'"):
        ServeArgs.from_any({"models": [{"id": "a"}, {"id": "b"}]})


def test_model_and_models_together_are_refused():
    with pytest.raises(ValidationError, match="either `model`"):
        ServeArgs.from_any({"model": {"id": "x"}, "models": [{"id": "a", "aliases": []}]})


def test_ids_that_differ_only_in_punctuation_are_refused():
    with pytest.raises(ValidationError, match="same engine deployment name"):
        ServeArgs.from_any({"models": [{"id": "org/m", "aliases": []}, {"id": "org-m", "aliases": []}]})


_name = st.text(alphabet="abcxyz-", min_size=1, max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_name, st.lists(_name, max_size=2), st.lists(_name, max_size=2)), min_size=1, max_size=3))
def test_validation_accepts_exactly_the_catalogs_with_unique_names(entries):
    models = [
        {"id": f"m{i}/{mid}", "aliases": aliases, "adapters": [{"id": a, "path": "/p"} for a in adapters]}
        for i, (mid, aliases, adapters) in enumerate(entries)
    ]
    names = [n for m in models for n in (m["id"], *m["aliases"], *(a["id"] for a in m["adapters"]))]
    if len(set(names)) == len(names):
        args = ServeArgs.from_any({"models": models})
        catalog = Catalog(args.resolve_catalog().models)
        for m in models:  # every name reaches its own model (and adapter)
            assert catalog.lookup(m["id"]).model.id == m["id"]
            for a in m["adapters"]:
                served = catalog.lookup(a["id"])
                assert served.model.id == m["id"] and served.id == a["id"]
    else:
        with pytest.raises(ValidationError, match="used twice"):
            ServeArgs.from_any({"models": models})


# -- the shipped multi-model config ------------------------------------------------------------------------------


def test_multi_model_serve_config_is_valid_and_names_each_engine_deployment():
    raw = yaml.safe_load((ROOT / "serve_config.multi.yaml").read_text())
    ServeDeploySchema.model_validate(raw)
    (app,) = raw["applications"]
    args = ServeArgs.from_any(app["args"])
    catalog = args.resolve_catalog().models
    assert len(catalog) == 2 and all(m.engine is not None and m.engine.kind == "vllm" for m in catalog)
    engines = {args.resolve_catalog().deployment_name(m.id) for m in catalog}
    assert {d["name"] for d in app["deployments"]} == {"Ingress", "Preprocessor", "Router", *engines}
    # It runs on a 2-core machine: every replica's logical CPUs fit, or Serve never places the last deployment.
    assert sum(d["num_replicas"] * d["ray_actor_options"]["num_cpus"] for d in app["deployments"]) <= 2
    main, small = catalog
    assert small.context_window < main.context_window
    assert small.engine.max_num_seqs < main.engine.max_num_seqs


# -- name resolution and the catalog's shapes ------------------------------------------------------------------


def _catalog() -> Catalog:
    return Catalog(ServeArgs.from_any(_two(adapters=[{"id": "small-pirate", "path": "/p", "aliases": ["arr"]}])).resolve_catalog().models)


def test_lookup_resolves_models_aliases_and_adapters():
    c = _catalog()
    assert c.lookup("main").model.id == "org/main-model" and c.lookup("main").adapter is None
    assert c.lookup("haiku").id == "org/small"
    pirate = c.lookup("arr")
    assert pirate.model.id == "org/small" and pirate.id == "small-pirate"
    assert c.lookup("hosted_vllm/small-pirate").id == "small-pirate"  # provider prefix
    with pytest.raises(RequestError) as err:
        c.lookup("org/other")
    assert err.value.kind == "not_found" and err.value.code == "model_not_found"


def test_models_list_names_every_model_alias_and_adapter():
    body = _catalog().list_body()
    cards = {c["id"]: c for c in body["data"]}
    assert set(cards) == {"org/main-model", "main", "org/small", "haiku", "small-pirate", "arr"}
    assert cards["small-pirate"]["parent"] == "org/small" and cards["org/small"]["parent"] is None
    assert cards["arr"]["root"] == "small-pirate" and cards["main"]["root"] == "org/main-model"


def test_codex_catalog_lists_models_and_adapters_and_hides_aliases():
    entries = {e["slug"]: e for e in codex_models.models_body(_catalog().models)["models"]}
    assert {s for s, e in entries.items() if e["visibility"] == "list"} == {"org/main-model", "org/small", "small-pirate"}
    assert entries["arr"]["visibility"] == "hide"


# -- one router per model ----------------------------------------------------------------------------------------


def _router(policy: str = "kv") -> CatalogRouter:
    cfg = RouterConfig(cost=CostConfig(block_size=16), policy=policy)  # type: ignore[arg-type]
    router = CatalogRouter.from_configs({"a": cfg, "b": cfg})
    for replica, model in (("ra1", "a"), ("ra2", "a"), ("rb1", "b")):
        router.register(replica, model, events=False)
    return router


def _req(rid: str, model: str, hashes: list[int]) -> RouteRequest:
    return RouteRequest(request_id=rid, model=model, block_hashes=hashes, prompt_tokens=16 * len(hashes), max_tokens=8)


@pytest.mark.parametrize("policy", ["kv", "approx"])
def test_a_prefix_routed_under_one_model_is_never_a_hit_for_another(policy):
    router = _router(policy)
    hashes = [11, 22, 33, 44]

    async def go():
        first = await router.route(_req("r1", "a", hashes))
        router.report(first.replica_id, [], ["r1"])  # done: equal load, so the prefix decides
        again = await router.route(_req("r2", "a", hashes))
        assert router.overlaps(hashes, "b") == {} and router.overlaps(hashes, "a")[first.replica_id] == 4
        other = await router.route(_req("r3", "b", hashes))
        return first, again, other

    first, again, other = asyncio.run(go())
    assert first.replica_id in ("ra1", "ra2") and again.replica_id == first.replica_id
    assert again.overlap_blocks == 4  # learned under model a
    assert other.replica_id == "rb1" and other.overlap_blocks == 0


def test_requests_go_only_to_their_models_replicas_and_leases_stay_per_model():
    router = _router()

    async def go():
        return [await router.route(_req(f"b{i}", "b", [i])) for i in range(5)]

    assert {d.replica_id for d in asyncio.run(go())} == {"rb1"}
    assert router.model_stats()["b"].in_flight == 5 and router.model_stats()["a"].in_flight == 0
    assert router.route_to(_req("x", "a", [1]), "rb1") is None  # never pinned on another model's replica
    router.report("rb1", [], ["b0", "b1"])
    router.release("b2")  # from the ingress, model unnamed
    router.release("b3", "b")
    assert router.model_stats()["b"].in_flight == 1
    assert {r: v.model for r, v in router.snapshot().items()} == {"ra1": "a", "ra2": "a", "rb1": "b"}


def test_a_replica_leaving_leaves_only_its_models_index():
    router = _router()
    router.remove("rb1")
    assert router.replicas() == ["ra1", "ra2"] and router.heartbeat("rb1") is False
    assert asyncio.run(router.route(_req("r", "b", [1]))).reason == "no_replica"
    with pytest.raises(RequestError):
        asyncio.run(router.route(_req("r", "nope", [1])))


# -- `agentserve codex-config` over a catalog --------------------------------------------------------------------


def test_codex_config_catalog_covers_every_model_of_the_multi_config(tmp_path, capsys):
    import json
    import tomllib

    from agentserve.cli import main

    serve = str(ROOT / "serve_config.multi.yaml")
    assert main(["codex-config", "--serve-config", serve, "--codex-home", str(tmp_path), "--model", "gpt-mini"]) == 0
    config = tomllib.loads((tmp_path / "config.toml").read_text())
    assert config["model"] == "gpt-mini"
    catalog = json.loads(open(config["model_catalog_json"]).read())
    windows = {m["slug"]: m["context_window"] for m in catalog["models"]}
    assert windows["smollm2-main"] == 32768 and windows["gpt-mini"] == windows["smollm2-haiku"] == 8192
    assert main(["codex-config", "--serve-config", serve, "--model", "gpt-nope"]) == 2
    assert "not served" in capsys.readouterr().err


def test_both_forms_resolve_to_the_same_shape_and_travel_as_plain_data():
    """build_app hands every deployment the resolved catalog as JSON: each model with its engine and deployment."""
    from agentserve.config import ResolvedCatalog

    single = ServeArgs().resolve_catalog()
    catalog = ServeArgs.from_any(_two()).resolve_catalog()
    for resolved in (single, catalog):
        again = ResolvedCatalog.from_any(resolved.model_dump(mode="json"))
        assert again == resolved
        assert all(again.engine(m.id) == m.engine for m in again.models)
        assert again.default == again.models[0]
    assert single.engine_deployments == ("Engine",)
    with pytest.raises(ValueError):
        ResolvedCatalog(models=(ModelSpec(),), engine_deployments=("Engine",))  # no engine filled in
    with pytest.raises(KeyError):
        catalog.model("not-served")
