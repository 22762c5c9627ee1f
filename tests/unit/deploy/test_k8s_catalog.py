"""The KubeRay generator's catalog form (values `models:`): one GPU worker group per model with its own shape and
pod bounds, each model's Engine-<slug> deployment pinned to its group, the manifest valid as the single form's is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import ServeDeploySchema

from agentserve.config import ServeArgs
from agentserve.deploy import k8s
from agentserve.deploy.values import K8sValues
from tests.unit.deploy.test_k8s_manifests import deployments, errors, serve_cfg

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "k8s" / "examples" / "two-models"
BIG, SMALL = "Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen/Qwen3-4B-Instruct-2507"


def two_models(**small_overrides) -> K8sValues:
    small = {
        "model": {"id": SMALL, "aliases": ["claude-haiku"], "path": "/models/small", "tool_call_parser": "hermes"},
        "tensor_parallel_size": 1,
        "accelerator_type": "L4",
        "engine": {"min_replicas": 1, "initial_replicas": 1, "max_replicas": 3},
        **small_overrides,
    }
    return K8sValues(
        models=[
            {
                "model": {"id": BIG, "aliases": ["claude-main"], "path": "/models/big", "tool_call_parser": "qwen3_coder"},
                "tensor_parallel_size": 4,
                "accelerator_type": "B200",
                "engine": {"min_replicas": 1, "initial_replicas": 2, "max_replicas": 8},
                "group": {"name": "b200", "gpus_per_pod": 8},
            },
            small,
        ]
    )


def groups(doc) -> dict[str, dict]:
    return {g["groupName"]: g for g in doc["spec"]["rayClusterConfig"]["workerGroupSpecs"]}


def pod_resource(group: dict) -> str:
    """The custom resource a group's pods advertise (Ray's --resources, a JSON string KubeRay quotes once more)."""
    (name,) = json.loads(json.loads(group["rayStartParams"]["resources"]))
    return name


def test_two_models_give_two_gpu_groups_of_their_own_shape_each_engine_on_its_own():
    doc = yaml.safe_load(k8s.render(two_models())["rayservice.yaml"])
    assert errors("rayservice.v1.schema.json", doc) == []
    g = groups(doc)
    assert set(g) == {"cpu", "b200", "gpu-qwen-qwen3-4b-instruct-2507"}
    big, small = g["b200"], g["gpu-qwen-qwen3-4b-instruct-2507"]
    for group, gpus in ((big, "8"), (small, "1")):  # TP=4 on 8-GPU pods; TP=1: one GPU per pod by default
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == group["rayStartParams"]["num-gpus"] == gpus
    assert small["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "12"  # 12 per GPU
    assert small["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    # Pod bounds from each engine's replica bounds: two TP=4 engines per 8-GPU pod, one TP=1 engine per pod.
    assert (big["replicas"], big["minReplicas"], big["maxReplicas"]) == (1, 1, 4)
    assert (small["replicas"], small["minReplicas"], small["maxReplicas"]) == (1, 1, 3)

    cfg = serve_cfg(doc)
    d = deployments(cfg)
    args = ServeArgs.from_any(cfg["applications"][0]["args"])
    assert [m.id for m in args.resolve_catalog().models] == [BIG, SMALL]
    assert list(d) == ["Ingress", "Preprocessor", "Router", *(args.resolve_catalog().deployment_name(m.id) for m in args.resolve_catalog().models)]
    for model, group, tp, accel in ((BIG, big, 4, "B200"), (SMALL, small, 1, "L4")):
        spec = next(m for m in args.resolve_catalog().models if m.id == model)
        assert spec.engine.tensor_parallel_size == tp
        engine = d[args.resolve_catalog().deployment_name(spec.id)]
        bundles = engine["placement_group_bundles"]
        assert len(bundles) == tp and engine["placement_group_strategy"] == "STRICT_PACK"
        # Every TP rank asks for a sliver of the resource only this model's group advertises...
        resource = pod_resource(group)
        assert all(b[resource] > 0 and b["GPU"] == 1 and b[f"accelerator_type:{accel}"] > 0 for b in bundles)
        # ...and for nothing the other model's group advertises, so it never lands there.
        others = {pod_resource(o) for n, o in groups(doc).items() if n not in ("cpu", group["groupName"])}
        assert not others & {k for b in bundles for k in b}
        assert group["maxReplicas"] * (int(group["rayStartParams"]["num-gpus"]) // tp) >= (
            engine["autoscaling_config"]["max_replicas"]
        )
        AutoscalingConfig(**engine["autoscaling_config"])
    assert d[args.resolve_catalog().engine_deployments[1]]["autoscaling_config"]["max_replicas"] == 3
    ServeDeploySchema.model_validate(cfg)


def test_catalog_args_take_the_gpu_configs_engine_section_under_each_models_overrides():
    v = two_models()
    small = v.models[1].model_copy(update={"model": {**v.models[1].model, "engine": {"max_num_seqs": 7}}})
    v = v.model_copy(update={"models": (v.models[0], small)})
    args = serve_cfg(yaml.safe_load(k8s.render(v)["rayservice.yaml"]))["applications"][0]["args"]
    gpu = yaml.safe_load((ROOT / "serve_config.gpu.yaml").read_text())["applications"][0]["args"]["engine"]
    assert "model" not in args and "engine" not in args
    assert args["models"][0]["engine"] == gpu
    assert args["models"][1]["engine"] == {**gpu, "max_num_seqs": 7, "tensor_parallel_size": 1}
    assert args["state"]["backend"] == "postgres"


def test_committed_two_model_example_is_generated_and_valid():
    argv = ["--values", str(EXAMPLE / "values.yaml"), "--out", str(EXAMPLE), "--only", "rayservice.yaml"]
    assert k8s.main([*argv, "--check"]) == 0, f"run `python -m agentserve.deploy.k8s {' '.join(argv)}`"
    doc = yaml.safe_load((EXAMPLE / "rayservice.yaml").read_text())
    assert errors("rayservice.v1.schema.json", doc) == []
    cfg = serve_cfg(doc)
    ServeDeploySchema.model_validate(cfg)
    assert len(ServeArgs.from_any(cfg["applications"][0]["args"]).resolve_catalog().models) == 2
    assert {n for n in groups(doc)} == {"cpu", "b200", "l4"}


def test_single_model_fields_and_models_together_are_refused():
    with pytest.raises(ValueError, match="not both"):
        K8sValues(tensor_parallel_size=8, models=two_models().models)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"tensor_parallel_size": 2, "group": {"gpus_per_pod": 3}}, "must divide"),
        ({"model": {"id": SMALL, "engine": {"tensor_parallel_size": 2}}}, "set its TP size once"),
        ({"group": {"name": "b200"}}, "used twice"),
        ({"group": {"name": "Small_GPU"}}, "lower-case"),
        ({"engine": {"min_replicas": 2, "initial_replicas": 1, "max_replicas": 3}}, "min <= initial <= max"),
        ({"group": {"cpus": "2"}}, "cannot hold its engines' placement bundles"),
    ],
)
def test_bad_catalog_values_are_refused_with_the_reason(overrides, message):
    with pytest.raises(ValueError, match=message):
        two_models(**overrides)


def test_a_catalog_with_a_duplicate_model_name_is_refused_at_generation():
    v = two_models(model={"id": SMALL, "aliases": ["claude-main"]})  # the big model's alias
    with pytest.raises(ValueError, match="claude-main"):
        k8s.render(v)


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    per_pod=st.integers(1, 4),
    bounds=st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(1, 12)).map(sorted),
)
def test_every_shape_gets_enough_pods_and_valid_manifests(tp, per_pod, bounds):
    least, initial, most = bounds
    v = two_models(
        tensor_parallel_size=tp,
        group={"gpus_per_pod": tp * per_pod},
        engine={"min_replicas": least, "initial_replicas": initial, "max_replicas": most},
    )
    doc = yaml.safe_load(k8s.render(v)["rayservice.yaml"])
    assert errors("rayservice.v1.schema.json", doc) == []
    small = groups(doc)["gpu-qwen-qwen3-4b-instruct-2507"]
    assert small["rayStartParams"]["num-gpus"] == str(tp * per_pod)
    assert small["minReplicas"] * per_pod >= least and small["maxReplicas"] * per_pod >= most
    assert small["maxReplicas"] == math.ceil(most / per_pod)  # and no more than needed
    assert small["minReplicas"] <= small["replicas"] <= small["maxReplicas"]
    engine = deployments(serve_cfg(doc))["Engine-Qwen-Qwen3-4B-Instruct-2507"]
    assert len(engine["placement_group_bundles"]) == tp
