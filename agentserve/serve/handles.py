"""Deployment handles on this process's transport.

A handle passed to a deployment's constructor carries the options of the process that built the application,
among them how calls travel (Serve's gRPC channel under RAY_SERVE_THROUGHPUT_OPTIMIZED, Ray actor calls
otherwise). `serve run` and KubeRay build the application inside the cluster, whose processes have
agentserve's Ray environment (agentserve/serve/ray_env.py); a Python driver that calls
`serve.run(build_app(...))` without it would hand every replica actor-call handles, and each hop of the request
path would cost about 2x (scripted chat TTFT p50 14.6 vs 7.1 ms: docs/BENCHMARKS.md, "Serving-layer overhead"). Rebuilt in
the replica, a handle takes the transport of the cluster it runs in, wherever the application was built.
"""

from __future__ import annotations

from ray.serve.handle import DeploymentHandle


def on_this_process(handle: DeploymentHandle) -> DeploymentHandle:
    """The same deployment's handle with this process's default options (what unpickling does, minus the
    builder's options)."""
    return DeploymentHandle(handle.deployment_name, handle.app_name)
