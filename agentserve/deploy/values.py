"""K8sValues: the one place where a KubeRay deployment's sizes, model and image are set (k8s/values.yaml).

Everything else in k8s/ is generated from these values plus serve_config.gpu.yaml (the GPU Serve config),
so the RayService's serveConfigV2 cannot drift from what `serve run serve_config.gpu.yaml` deploys.

Two forms, as ServeArgs has: one model (`model`, `tensor_parallel_size`, `engine`, `gpu_workers`), or the
catalog (`models`: a list of CatalogModel, each with its own engine scaling and its own GPU worker group).
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CpuDeployment(_Strict):
    """A CPU-bound deployment (Ingress, Preprocessor) autoscaled on Serve's ongoing requests."""

    min_replicas: int = 2
    max_replicas: int = 16
    target_ongoing_requests: float = 64
    num_cpus: float = 2


class EngineScaling(_Strict):
    """Engine replicas (one TP group each), scaled by agentserve.serve.autoscaling:PrefillPressurePolicy."""

    min_replicas: int = 1
    initial_replicas: int = 2
    max_replicas: int = 8
    # Uncached prompt tokens waiting for prefill per replica that the policy aims for. 32k tokens is about
    # 1-2 s of prefill for a 30B-A3B MoE at TP=4 on B200 (estimate from public vLLM throughput figures).
    target_pending_prefill_tokens: int = 32_768
    ttft_target_s: float = 2.0
    idle_ongoing_per_replica: float = 4.0
    upscale_delay_s: float = 15.0
    downscale_delay_s: float = 600.0  # engines take minutes to start: give traffic time to come back
    max_ongoing_requests: int = 1024


class GpuWorkers(_Strict):
    group_name: str = "b200"
    gpus_per_pod: int = 8
    cpus: str = "96"
    memory: str = "960Gi"
    shm_size: str = "64Gi"  # NCCL and vLLM's shared-memory broadcast for TP workers
    min_pods: int = 1
    node_selector: dict[str, str] = Field(default_factory=lambda: {"cloud.google.com/gke-accelerator": "nvidia-b200"})
    tolerations: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )


class CpuWorkers(_Strict):
    group_name: str = "cpu"
    cpus: str = "16"
    memory: str = "64Gi"
    min_pods: int = 1
    max_pods: int = 8


class Head(_Strict):
    cpus: str = "8"
    memory: str = "32Gi"


class ModelCache(_Strict):
    claim_name: str = "agentserve-models"
    mount_path: str = "/models"
    size: str = "500Gi"
    storage_class: str | None = None  # None: the cluster default; must support ReadWriteMany/ReadOnlyMany


class Observability(_Strict):
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    grafana_url: str = "http://grafana.monitoring.svc:3000"
    # Grafana URL as seen by the browser that opens the Ray dashboard (it embeds Grafana panels).
    grafana_iframe_url: str = "http://localhost:3000"
    podmonitor_labels: dict[str, str] = Field(default_factory=lambda: {"release": "prometheus"})
    scrape_interval: str = "15s"


class Secrets(_Strict):
    """The Kubernetes Secret the pods read the state credentials from (created by hand, never committed).

    kubectl -n agentserve create secret generic agentserve-secrets \
      --from-literal=secret-key="$(openssl rand -hex 32)" --from-literal=postgres-dsn='postgresql://...' \
      --from-literal=api-keys="$(openssl rand -hex 24),$(openssl rand -hex 24)" \
      --from-literal=admin-keys="$(openssl rand -hex 24)"

    api-keys is required (the Serve config listens on 0.0.0.0, and build_app refuses that without keys);
    admin-keys is optional (without it the admin routes do not exist).
    """

    name: str = "agentserve-secrets"
    api_keys: str = "api-keys"  # -> AGENTSERVE_API_KEYS: the callers' keys, comma separated
    admin_keys: str = "admin-keys"  # optional -> AGENTSERVE_ADMIN_KEYS: the /v1/admin/* credential
    secret_key: str = "secret-key"  # -> AGENTSERVE_SECRET_KEY: signs thinking, seals encrypted_content
    previous_secret_keys: str = "previous-secret-keys"  # optional -> AGENTSERVE_PREVIOUS_SECRET_KEYS (rotation)
    postgres_dsn: str = "postgres-dsn"  # -> AGENTSERVE_POSTGRES_DSN: Responses store and per-key limits


class Network(_Strict):
    """The NetworkPolicy on the Ray pods: Ray's own ports (GCS 6379, dashboard 8265, client 10001, raylet, object
    store, the replicas' direct-ingress ports) only from the cluster's own pods and the KubeRay operator; the Serve
    HTTP port from `http_from` (empty: from anywhere); the metrics port from the monitoring namespace."""

    enabled: bool = True
    http_from: list[dict[str, Any]] = Field(default_factory=list)  # NetworkPolicyPeer entries (ipBlock, selectors)
    operator_namespace: str = "kuberay-operator"  # where the KubeRay operator runs (it deploys through 8265)
    monitoring_namespace: str = "monitoring"  # where Prometheus scrapes from


class EngineGroup(_Strict):
    """The GPU worker group of one catalog model. Left out, the pod is sized from the model's TP size: one engine
    replica per pod (gpus_per_pod = tensor_parallel_size) with 12 CPUs, 120Gi and 8Gi of /dev/shm per GPU (the
    single-model form's 8-GPU B200 pod, per GPU)."""

    name: str | None = None  # None: `gpu-` + the model id, lower case, every other character as `-`
    gpus_per_pod: int | None = Field(default=None, ge=1)  # None: the model's tensor_parallel_size
    cpus: str | None = None
    memory: str | None = None
    shm_size: str | None = None
    # None: GKE's accelerator label for the model's accelerator_type (`nvidia-<type, lower case>`); set it when
    # your nodes are labelled otherwise (GKE's H100 is `nvidia-h100-80gb`).
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )


class CatalogModel(_Strict):
    """One model of the catalog form: its ServeArgs `models` entry, its TP size, its engine's autoscaling bounds
    and the GPU worker group its Engine-<slug> deployment runs on (and only it)."""

    # The ServeArgs.models entry: id, path, aliases, parsers, context window, adapters; its `engine` overrides
    # the engine section of serve_config.gpu.yaml (tensor_parallel_size comes from the field below).
    model: dict[str, Any]
    tensor_parallel_size: int = Field(default=1, ge=1)
    accelerator_type: str | None = "B200"  # adds Ray's accelerator_type:<X> resource to each TP bundle
    engine: EngineScaling = EngineScaling()
    group: EngineGroup = EngineGroup()

    @model_validator(mode="after")
    def _consistent(self) -> "CatalogModel":
        if not isinstance(self.model.get("id"), str) or not self.model["id"]:
            raise ValueError("every entry of `models` needs `model.id`")
        tp = (self.model.get("engine") or {}).get("tensor_parallel_size")
        if tp is not None and tp != self.tensor_parallel_size:
            raise ValueError(
                f"model {self.model['id']!r}: set its TP size once, as the entry's `tensor_parallel_size` "
                f"(model.engine.tensor_parallel_size={tp} differs)"
            )
        if self.gpus_per_pod % self.tensor_parallel_size:
            raise ValueError(
                f"model {self.model['id']!r}: tensor_parallel_size must divide group.gpus_per_pod "
                "(STRICT_PACK in one pod)"
            )
        e = self.engine
        if not e.min_replicas <= e.initial_replicas <= e.max_replicas:
            raise ValueError(f"model {self.model['id']!r}: engine replicas must satisfy min <= initial <= max")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", self.group_name):
            raise ValueError(
                f"model {self.model['id']!r}: worker group name {self.group_name!r} must be at most 40 lower-case "
                "letters, digits and `-` (it names pods); set group.name"
            )
        return self

    @property
    def id(self) -> str:
        return self.model["id"]

    @property
    def group_name(self) -> str:
        if self.group.name is not None:
            return self.group.name
        return ("gpu-" + re.sub(r"[^a-z0-9]+", "-", self.id.lower()).strip("-"))[:40].rstrip("-")

    @property
    def gpus_per_pod(self) -> int:
        return self.group.gpus_per_pod or self.tensor_parallel_size

    @property
    def engines_per_pod(self) -> int:
        return self.gpus_per_pod // self.tensor_parallel_size

    @property
    def min_pods(self) -> int:
        return math.ceil(self.engine.min_replicas / self.engines_per_pod)

    @property
    def initial_pods(self) -> int:
        return math.ceil(self.engine.initial_replicas / self.engines_per_pod)

    @property
    def max_pods(self) -> int:
        """Enough pods for engine.max_replicas TP groups (each group stays inside one pod)."""
        return math.ceil(self.engine.max_replicas / self.engines_per_pod)

    @property
    def node_selector(self) -> dict[str, str]:
        if self.group.node_selector is not None:
            return dict(self.group.node_selector)
        if self.accelerator_type is None:
            return {}
        return {"cloud.google.com/gke-accelerator": f"nvidia-{self.accelerator_type.lower()}"}


# Fields of the single-model form that the catalog form sets per model instead.
_SINGLE_MODEL_FIELDS = ("model", "tensor_parallel_size", "accelerator_type", "engine", "gpu_workers")


class K8sValues(_Strict):
    name: str = "agentserve"
    namespace: str = "agentserve"
    image: str = "registry.example.com/agentserve:0.1.0-ray2.60.0-cu128"  # build with k8s/Dockerfile
    ray_version: str = "2.60.0"
    # `agentserve-haproxy` as k8s/Dockerfile's `pip install` puts it in the image (the ray-llm image's Python): the
    # HAProxy every Serve proxy node runs (agentserve/serve/haproxy_front.py).
    haproxy_binary: str = "/home/ray/anaconda3/bin/agentserve-haproxy"
    # ServeArgs.model overrides on top of serve_config.gpu.yaml (id, path, aliases, parsers, context window).
    model: dict[str, Any] = Field(default_factory=dict)
    tensor_parallel_size: int = 4
    accelerator_type: str | None = "B200"  # adds Ray's accelerator_type:<X> resource to each TP bundle
    cpus_per_gpu_bundle: int = 4
    http_port: int = 8000
    metrics_port: int = 8080
    request_timeout_s: int = 600
    # Longest agent turn we let finish while a replica drains (scale-down, upgrade).
    drain_timeout_s: int = 600
    engine: EngineScaling = EngineScaling()
    ingress: CpuDeployment = CpuDeployment(min_replicas=2, max_replicas=8, target_ongoing_requests=256)
    preprocessor: CpuDeployment = CpuDeployment(min_replicas=2, max_replicas=16, target_ongoing_requests=8)
    # Router replicas, each with the whole prefix index (serve/deployments/router_calls.py): two lose no new
    # request when one dies (one Router meant ~20 s of refusals while Serve restarted it and it relearnt the cluster).
    router_replicas: int = Field(default=2, ge=1)
    head: Head = Head()
    gpu_workers: GpuWorkers = GpuWorkers()
    cpu_workers: CpuWorkers = CpuWorkers()
    model_cache: ModelCache = ModelCache()
    observability: Observability = Observability()
    secrets: Secrets = Secrets()
    network: Network = Network()
    # Ray's token authentication (RAY_AUTH_MODE=token, managed by KubeRay's authOptions): without it anyone who
    # reaches the dashboard or GCS port can run code on the cluster. The NetworkPolicy keeps those ports off the pod
    # network too; this holds where NetworkPolicies are not enforced.
    ray_token_auth: bool = True
    # The catalog form: several models, each with its own engine deployment and GPU worker group; non-empty
    # replaces the single-model fields above (model, tensor_parallel_size, accelerator_type, engine, gpu_workers).
    models: tuple[CatalogModel, ...] = ()

    @model_validator(mode="after")
    def _one_form(self) -> "K8sValues":
        if not self.models:
            return self
        both = [f for f in _SINGLE_MODEL_FIELDS if f in self.model_fields_set]
        if both:
            raise ValueError(
                f"give either the single-model fields ({', '.join(both)}) or `models` (the catalog, where each "
                "entry has its own), not both"
            )
        for m in self.models:
            need = self.cpus_per_gpu_bundle * m.gpus_per_pod
            if m.group.cpus is not None and m.group.cpus.isdigit() and int(m.group.cpus) < need:
                raise ValueError(
                    f"model {m.id!r}: group.cpus={m.group.cpus} cannot hold its engines' placement bundles "
                    f"({self.cpus_per_gpu_bundle} CPUs per GPU x {m.gpus_per_pod} GPUs = {need})"
                )
        groups = [m.group_name for m in self.models] + [self.cpu_workers.group_name]
        dup = sorted({g for g in groups if groups.count(g) > 1})
        if dup:
            raise ValueError(f"worker group name(s) {dup} used twice: give the models distinct group.name")
        return self

    @model_validator(mode="after")
    def _tp_fits_a_pod(self) -> "K8sValues":
        if self.gpu_workers.gpus_per_pod % self.tensor_parallel_size:
            raise ValueError("tensor_parallel_size must divide gpu_workers.gpus_per_pod (STRICT_PACK in one pod)")
        e = self.engine
        if not e.min_replicas <= e.initial_replicas <= e.max_replicas:
            raise ValueError("engine replicas must satisfy min <= initial <= max")
        return self

    @property
    def engines_per_pod(self) -> int:
        return self.gpu_workers.gpus_per_pod // self.tensor_parallel_size

    @property
    def gpu_max_pods(self) -> int:
        """Enough GPU pods for engine.max_replicas TP groups (each group stays inside one pod)."""
        return math.ceil(self.engine.max_replicas / self.engines_per_pod)

    @property
    def gpu_initial_pods(self) -> int:
        return max(self.gpu_workers.min_pods, math.ceil(self.engine.initial_replicas / self.engines_per_pod))
