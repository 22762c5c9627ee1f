"""K8sValues: the one place where a KubeRay deployment's sizes, model and image are set (k8s/values.yaml).

Everything else in k8s/ is generated from these values plus serve_config.gpu.yaml (the GPU Serve config),
so the RayService's serveConfigV2 cannot drift from what `serve run serve_config.gpu.yaml` deploys.
"""

from __future__ import annotations

import math
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
      --from-literal=secret-key="$(openssl rand -hex 32)" --from-literal=postgres-dsn='postgresql://...'
    """

    name: str = "agentserve-secrets"
    secret_key: str = "secret-key"  # -> AGENTSERVE_SECRET_KEY: signs thinking, seals encrypted_content
    previous_secret_keys: str = "previous-secret-keys"  # optional -> AGENTSERVE_PREVIOUS_SECRET_KEYS (rotation)
    postgres_dsn: str = "postgres-dsn"  # -> AGENTSERVE_POSTGRES_DSN: Responses store and per-key limits


class K8sValues(_Strict):
    name: str = "agentserve"
    namespace: str = "agentserve"
    image: str = "registry.example.com/agentserve:0.1.0-ray2.60.0-cu128"  # build with k8s/Dockerfile
    ray_version: str = "2.60.0"
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
    head: Head = Head()
    gpu_workers: GpuWorkers = GpuWorkers()
    cpu_workers: CpuWorkers = CpuWorkers()
    model_cache: ModelCache = ModelCache()
    observability: Observability = Observability()
    secrets: Secrets = Secrets()

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
