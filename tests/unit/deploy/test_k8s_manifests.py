"""k8s/: manifests valid against the vendored CRD schemas, serveConfigV2 valid for Ray Serve, generator in sync."""

from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import ServeDeploySchema

from agentserve import metrics
from agentserve.config import ServeArgs
from agentserve.deploy import k8s
from agentserve.deploy.dashboard import dashboard
from agentserve.deploy.values import K8sValues
from agentserve.engines.vllm import engine_args

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "k8s"


def strict(schema: Any) -> Any:
    """Reject unknown fields, as `kubectl apply --validate=strict` does (CRD schemas only prune them)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@lru_cache
def validator(name: str) -> jsonschema.Draft7Validator:
    schema = strict(json.loads((K8S / "schema" / name).read_text()))
    schema["properties"]["metadata"] = {"type": "object", "required": ["name"]}
    return jsonschema.Draft7Validator(schema)


def errors(name: str, doc: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(name).iter_errors(doc)]


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((K8S / name).read_text())


def serve_cfg(doc: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(doc["spec"]["serveConfigV2"])


def deployments(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in cfg["applications"][0]["deployments"]}


def test_committed_files_are_generated_from_values():
    assert k8s.main(["--check"]) == 0, "run `python -m agentserve.deploy.k8s` and commit k8s/"


def test_rayservice_matches_kuberay_crd():
    doc = load("rayservice.yaml")
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayService")
    assert errors("rayservice.v1.schema.json", doc) == []


def test_crd_validation_catches_mistakes():
    doc = load("rayservice.yaml")
    bad = copy.deepcopy(doc)
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][1]["maxReplica"] = 4  # typo
    bad["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0  # must be a string
    assert len(errors("rayservice.v1.schema.json", bad)) == 2


def test_podmonitor_matches_prometheus_operator_crd():
    doc = load("podmonitor.yaml")
    assert errors("podmonitor.v1.schema.json", doc) == []
    (endpoint,) = doc["spec"]["podMetricsEndpoints"]
    # Scrapes the container port every Ray pod declares for Ray's metrics agent.
    rc = load("rayservice.yaml")["spec"]["rayClusterConfig"]
    for group in [rc["headGroupSpec"], *rc["workerGroupSpecs"]]:
        ports = {p["name"]: p["containerPort"] for p in group["template"]["spec"]["containers"][0]["ports"]}
        assert ports[endpoint["port"]] == int(group["rayStartParams"]["metrics-export-port"])


def test_serve_config_v2_is_valid_for_ray_serve_and_agentserve():
    cfg = serve_cfg(load("rayservice.yaml"))
    schema = ServeDeploySchema.model_validate(cfg)
    (app,) = schema.applications
    assert app.import_path == "agentserve.serve.app:build_app"
    ServeArgs.from_any(app.args)
    for d in deployments(cfg).values():
        if "autoscaling_config" in d:
            AutoscalingConfig(**d["autoscaling_config"])  # imports the custom policy too


def test_serve_config_v2_is_the_gpu_config_with_values_applied():
    gpu = yaml.safe_load((ROOT / "serve_config.gpu.yaml").read_text())
    cfg = serve_cfg(load("rayservice.yaml"))
    values = k8s.load_values()
    expected = gpu["applications"][0]["args"]
    expected["model"].update(values.model)
    expected["state"] = {**expected.get("state", {}), "backend": "postgres"}  # many nodes share one database
    expected["admin"] = {"adapter_root": "/models/adapters"}  # run-time adapters only from the model cache
    assert cfg["applications"][0]["args"] == expected
    assert cfg["applications"][0]["import_path"] == gpu["applications"][0]["import_path"]


def test_tp4_b200_engine_placement_and_pod_resources():
    doc = load("rayservice.yaml")
    cfg = serve_cfg(doc)
    engine = deployments(cfg)["Engine"]
    args = ServeArgs.from_any(cfg["applications"][0]["args"])
    tp = args.engine.tensor_parallel_size
    assert tp == 4
    assert engine["placement_group_strategy"] == "STRICT_PACK"
    bundles = engine["placement_group_bundles"]
    assert len(bundles) == tp and all(b["GPU"] == 1 and b["accelerator_type:B200"] > 0 for b in bundles)
    assert bundles[0]["CPU"] >= engine["ray_actor_options"]["num_cpus"]  # the replica actor fits bundle 0
    kwargs = engine_args(args.engine, Path(args.model.path), args.model.context_window)
    assert kwargs["tensor_parallel_size"] == 4 and kwargs["distributed_executor_backend"] == "ray"

    gpu = next(g for g in doc["spec"]["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == "b200")
    pod = gpu["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == gpu["rayStartParams"]["num-gpus"] == "8"
    assert int(limits["nvidia.com/gpu"]) % tp == 0
    # Enough GPU pods for the engine's max replicas, two TP=4 groups per 8-GPU pod.
    assert gpu["maxReplicas"] * (8 // tp) >= engine["autoscaling_config"]["max_replicas"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
    assert vols["model-cache"]["persistentVolumeClaim"]["readOnly"] is True
    assert args.model.path.startswith(pod["containers"][0]["volumeMounts"][1]["mountPath"])
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_cpu_deployments_scale_independently_on_cpu_workers():
    doc = load("rayservice.yaml")
    d = deployments(serve_cfg(doc))
    for name in ("Ingress", "Preprocessor"):
        assert "num_replicas" not in d[name]
        assert d[name]["autoscaling_config"]["max_replicas"] > d[name]["autoscaling_config"]["min_replicas"]
        assert d[name]["ray_actor_options"]["resources"] == {k8s.CPU_RESOURCE: 0.001}
    policy = d["Engine"]["autoscaling_config"]["policy"]
    assert policy["policy_function"] == k8s.ENGINE_POLICY
    cpu = next(g for g in doc["spec"]["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == "cpu")
    assert json.loads(json.loads(cpu["rayStartParams"]["resources"])) == {k8s.CPU_RESOURCE: 1000}
    head = doc["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]
    assert head["num-cpus"] == "0"  # nothing that needs CPU (no replicas) lands on the head


def test_graceful_drain_covers_the_longest_turn():
    doc = load("rayservice.yaml")
    v = k8s.load_values()
    d = deployments(serve_cfg(doc))
    assert d["Engine"]["graceful_shutdown_timeout_s"] >= v.drain_timeout_s
    assert d["Ingress"]["graceful_shutdown_timeout_s"] >= v.drain_timeout_s
    assert doc["spec"]["rayClusterDeletionDelaySeconds"] > v.drain_timeout_s
    for g in doc["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        assert g["template"]["spec"]["terminationGracePeriodSeconds"] > v.drain_timeout_s
        c = g["template"]["spec"]["containers"][0]
        assert "8000/-/healthz" in c["readinessProbe"]["exec"]["command"][-1]


def test_one_place_sets_tp_replicas_model_and_image():
    v = K8sValues(
        tensor_parallel_size=8,
        image="example.org/a:1",
        model={"id": "org/big", "path": "/models/big"},
        engine={"min_replicas": 1, "initial_replicas": 1, "max_replicas": 3},
    )
    files = k8s.render(v)
    doc = yaml.safe_load(files["rayservice.yaml"])
    cfg = serve_cfg(doc)
    engine = deployments(cfg)["Engine"]
    assert len(engine["placement_group_bundles"]) == 8
    assert cfg["applications"][0]["args"]["engine"]["tensor_parallel_size"] == 8
    assert cfg["applications"][0]["args"]["model"]["id"] == "org/big"
    assert engine["autoscaling_config"]["max_replicas"] == 3
    groups = doc["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert groups[1]["maxReplicas"] == 3  # one TP=8 group per 8-GPU pod
    images = {c["image"] for g in [doc["spec"]["rayClusterConfig"]["headGroupSpec"], *groups]
              for c in g["template"]["spec"]["containers"]}
    assert images == {"example.org/a:1"}
    assert errors("rayservice.v1.schema.json", doc) == []
    ServeDeploySchema.model_validate(cfg)


def test_tp_must_divide_the_pod():
    with pytest.raises(ValueError):
        K8sValues(tensor_parallel_size=3)


def test_kustomization_lists_every_generated_manifest():
    kust = load("kustomization.yaml")
    listed = set(kust["resources"]) | {f for g in kust["configMapGenerator"] for f in g["files"]}
    assert listed == set(k8s.render(k8s.load_values()))
    for name in listed:
        assert (K8S / name).exists()


def test_dashboard_queries_name_metrics_that_exist():
    """Every ray_agentserve_* series on the dashboard is defined in agentserve.metrics (no dead panels)."""
    defined = {s.name for fam in metrics.REGISTRY.collect() for s in fam.samples} | {
        fam.name for fam in metrics.REGISTRY.collect()
    }
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"ray_(agentserve_[a-z_]+)", e)}
    assert used
    missing = {m for m in used if m not in defined and re.sub(r"_(bucket|total)$", "", m) not in defined}
    assert missing == set()


def test_every_pod_reads_the_secret_key_and_postgres_dsn_from_the_kubernetes_secret():
    doc = load("rayservice.yaml")
    rc = doc["spec"]["rayClusterConfig"]
    secret = k8s.load_values().secrets
    for group in [rc["headGroupSpec"], *rc["workerGroupSpecs"]]:
        env = {e["name"]: e for e in group["template"]["spec"]["containers"][0]["env"]}
        for name, key, optional in [
            ("AGENTSERVE_SECRET_KEY", secret.secret_key, False),  # required: no pod starts without it
            ("AGENTSERVE_PREVIOUS_SECRET_KEYS", secret.previous_secret_keys, True),
            ("AGENTSERVE_POSTGRES_DSN", secret.postgres_dsn, False),
            ("AGENTSERVE_API_KEYS", secret.api_keys, False),  # required: the Serve config listens on 0.0.0.0
            ("AGENTSERVE_ADMIN_KEYS", secret.admin_keys, True),  # without it the admin routes do not exist
        ]:
            assert env[name]["valueFrom"]["secretKeyRef"] == {"name": secret.name, "key": key, "optional": optional}
            assert "value" not in env[name]  # never a literal in the manifest
    args = ServeArgs.from_any(serve_cfg(doc)["applications"][0]["args"])
    assert args.state.backend == "postgres" and args.state.postgres_dsn is None and args.secret_key is None
    assert not args.allow_generated_secret_key



def test_the_network_facing_deployment_is_authenticated_and_ray_is_not_on_the_pod_network(monkeypatch):
    doc = load("rayservice.yaml")
    cfg = serve_cfg(doc)
    args = ServeArgs.from_any(cfg["applications"][0]["args"])
    host = cfg["http_options"]["host"]
    assert host == "0.0.0.0" and not args.api_keys and not args.allow_unauthenticated
    with pytest.raises(ValueError, match="AGENTSERVE_API_KEYS"):  # what build_app does without the Secret's keys
        args.check_exposure(host)
    assert doc["spec"]["rayClusterConfig"]["authOptions"] == {"mode": "token"}  # Ray's own token auth
    assert args.admin.keys == () and args.admin.adapter_root == "/models/adapters"
    policy = load("networkpolicy.yaml")
    assert policy["kind"] == "NetworkPolicy" and policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "agentserve"}
    rules = policy["spec"]["ingress"]
    open_ports = {p["port"] for r in rules if "from" not in r for p in r["ports"]}
    assert open_ports == {8000}  # from anywhere: only the Serve HTTP port (HAProxy, API keys)
    for rule in rules:
        ports = {p["port"] for p in rule.get("ports", [])}
        if {6379, 8265, 10001} & ports or not ports:  # Ray's ports: only from its own pods or the operator
            assert all("podSelector" in peer or "namespaceSelector" in peer for peer in rule["from"]), rule
    pods = [rule for rule in rules if not rule.get("ports")]
    assert pods == [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "agentserve"}}}]}]
