"""The KubeRay cluster's shape on one machine: a head node, a CPU worker node and GPU "pods", each a Ray node of its
own, running the Serve config the KubeRay generator emits (agentserve/deploy/k8s.py).

    python -m agentserve.deploy.local_cluster [--gpu-pods 2] [--port 8000]   # blocks; Ctrl-C stops every node

Each node is a raylet with the resources its pod advertises on KubeRay (`ray.cluster_utils.Cluster`, Ray's own way
to run several nodes on one machine): the head `num-cpus: 0` (GCS, Serve controller, HTTP proxy; no replicas), the
CPU worker group's pod `agentserve_cpu` (Ingress, Preprocessor, Router ask for it), each GPU pod its GPUs and
`accelerator_type:<X>` (each Engine replica's placement group asks for TP bundles of both). The GPUs are Ray
resources only: the Engine is the scripted test double, so the placement, KV events, leases and heartbeats between
nodes are real and no GPU is needed.

What differs from the generated config, and why (`local_config`), nothing else:
- the model is the embedded one and the engine scripted (no GPU here);
- one HTTP proxy on the head, on 127.0.0.1 (`EveryNode` would bind one port once per node: on one machine, one
  address, the second bind fails);
- the state's PostgreSQL DSN and the signing key, which KubeRay puts in every pod's environment from the Secret,
  are the application's runtime environment.
A GPU pod here is 4 GPUs (one TP=4 Engine replica), not the values' 8, so two pods show two nodes of engines.
"""

from __future__ import annotations

import argparse
import copy
import os
import secrets
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import yaml

from agentserve.deploy.k8s import CPU_RESOURCE, serve_config
from agentserve.deploy.values import K8sValues
from agentserve.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
APP = "agentserve"
GPU_POD = {"gpus_per_pod": 4, "cpus": "16"}  # one TP=4 Engine replica per pod (module docstring)


def local_values(**overrides: Any) -> K8sValues:
    return K8sValues.model_validate({"gpu_workers": GPU_POD, **overrides})


def local_config(
    values: K8sValues,
    *,
    port: int,
    dsn: str,
    engine: dict[str, Any],
    secret_key: str | None = None,
    model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The generator's Serve config with the local substitutions of the module docstring. `engine`: the scripted
    engine's section (its rules); `model`: the embedded default's (serve_config.yaml) unless given."""
    cfg = copy.deepcopy(serve_config(values))
    cfg["proxy_location"] = "HeadOnly"
    cfg["http_options"] = {**cfg["http_options"], "host": "127.0.0.1", "port": port}
    (app,) = cfg["applications"]
    embedded = yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"][0]["args"]["model"]
    app["args"]["model"] = model or embedded
    app["args"]["engine"] = {"kind": "scripted", "block_size": 16, **engine}
    env = {"AGENTSERVE_POSTGRES_DSN": dsn, "AGENTSERVE_SECRET_KEY": secret_key or secrets.token_urlsafe(32)}
    runtime_env = app.setdefault("runtime_env", {})
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **env}
    return cfg


@dataclass
class Node:
    """One Ray node of the local cluster and the pod it stands for."""

    role: str  # "head", "cpu", "gpu"
    node: Any  # ray._private.node.Node
    id: str = ""


@dataclass
class LocalCluster:
    """The Ray cluster: its nodes by role; `add_gpu_pod` / `kill` change it while Serve runs."""

    values: K8sValues
    cluster: Any  # ray.cluster_utils.Cluster
    nodes: list[Node] = field(default_factory=list)

    def _add(self, role: str, **resources: Any) -> Node:
        node = Node(role, self.cluster.add_node(wait=True, **resources))
        node.id = node.node.node_id
        self.nodes.append(node)
        return node

    def add_cpu_pod(self) -> Node:
        return self._add("cpu", num_cpus=int(self.values.cpu_workers.cpus), resources={CPU_RESOURCE: 1000})

    def add_gpu_pod(self) -> Node:
        gpus = self.values.gpu_workers.gpus_per_pod
        resources = {f"accelerator_type:{self.values.accelerator_type}": 1} if self.values.accelerator_type else {}
        return self._add("gpu", num_cpus=gpus * self.values.cpus_per_gpu_bundle, num_gpus=gpus, resources=resources)

    def kill(self, node: Node) -> None:
        """The pod is gone: its raylet and every process on it killed at once (no graceful stop)."""
        self.cluster.remove_node(node.node, allow_graceful=False)
        self.nodes.remove(node)

    def by_role(self, role: str) -> list[Node]:
        return [n for n in self.nodes if n.role == role]


@contextmanager
def local_cluster(values: K8sValues, gpu_pods: int = 2, *, dashboard: bool = False) -> Iterator[LocalCluster]:
    """Start the nodes (every node's processes get the Ray environment `make serve` and the KubeRay pods ship),
    connect this process as the driver, yield; every node stopped after."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from agentserve.serve import ray_env

    for key, value in ray_env.beside_others().items():  # read by each raylet at its start, from this environment
        os.environ.setdefault(key, value)
    import ray
    from ray.cluster_utils import Cluster

    head_args: dict[str, Any] = {"num_cpus": 0, "include_dashboard": dashboard}
    if dashboard:
        head_args.update(dashboard_host="127.0.0.1", dashboard_port=free_port())
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    local = LocalCluster(values, cluster, [Node("head", cluster.head_node, cluster.head_node.node_id)])
    try:
        local.add_cpu_pod()
        for _ in range(gpu_pods):
            local.add_gpu_pod()
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="serve", log_to_driver=False)
        yield local
    finally:
        try:
            from ray import serve

            serve.shutdown()
        except Exception:  # noqa: BLE001 - the cluster goes anyway
            pass
        ray.shutdown()
        cluster.shutdown()


def deploy(config: dict[str, Any]) -> None:
    """Apply the config through the Serve controller (what the dashboard's REST API and KubeRay do), Serve started
    with its HTTP options first."""
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    serve.start(http_options=config["http_options"], proxy_location=config["proxy_location"])
    _get_global_client().deploy_apps(ServeDeploySchema.model_validate(config))


def placement() -> dict[str, dict[str, str]]:
    """Deployment -> replica id -> node id of its RUNNING replicas."""
    from ray.serve.context import _get_global_client

    details = _get_global_client().get_serve_details()
    deployments = details["applications"][APP]["deployments"]
    return {
        name: {r["replica_id"]: r["node_id"] for r in d["replicas"] if r["state"] == "RUNNING"}
        for name, d in deployments.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentserve.deploy.local_cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu-pods", type=int, default=2)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--postgres-dsn", default=os.environ.get("AGENTSERVE_POSTGRES_DSN", ""),
                    help="the state backend (default: $AGENTSERVE_POSTGRES_DSN)")
    a = ap.parse_args(argv)
    if not a.postgres_dsn:
        ap.error("the cluster's state lives in PostgreSQL: pass --postgres-dsn or set AGENTSERVE_POSTGRES_DSN")
    values = local_values()
    engine = {"rules": [{"match": "", "reply": "Hello from a GPU pod.", "itl_ms": 20}]}
    with local_cluster(values, a.gpu_pods, dashboard=True) as c:
        deploy(local_config(values, port=a.port, dsn=a.postgres_dsn, engine=engine))
        print(f"nodes: {[(n.role, n.id[:8]) for n in c.nodes]}; serving on http://127.0.0.1:{a.port}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
