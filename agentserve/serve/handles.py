"""Deployment handles on this process's transport.

A handle passed to a deployment's constructor carries the options of the process that built the application,
among them how calls travel (Serve's gRPC channel under RAY_SERVE_THROUGHPUT_OPTIMIZED, Ray actor calls
otherwise). `serve run` and KubeRay build the application inside the cluster, whose processes have
agentserve's Ray environment (agentserve/serve/ray_env.py); a Python driver that calls
`serve.run(build_app(...))` without it would hand every replica actor-call handles, and each hop of the request
path would cost about 2x (scripted chat TTFT p50 14.6 vs 7.1 ms: docs/BENCHMARKS.md, "Serving-layer overhead"). Rebuilt in
the replica, a handle takes the transport of the cluster it runs in, wherever the application was built.

Calls and results travel as plain pickle, not Serve's default cloudpickle: every message between agentserve's
deployments is an instance of an importable class (pydantic models, dataclasses), so cloudpickle's one addition,
pickling classes and functions by value, is never needed, and its per-object Python hook cost the Ingress 7.2 against 4.4 ms to send a 300-turn agent conversation to the
Preprocessor (`agentserve bench request-pickle`, then scripts/bench_request_pickle.py, at git 3e5d9a2; docs/BENCHMARKS.md, "What a long prompt costs to
carry").
"""

from __future__ import annotations

from ray.serve._private.handle_options import DynamicHandleOptions
from ray.serve.handle import DeploymentHandle


def on_this_process(handle: DeploymentHandle) -> DeploymentHandle:
    """The same deployment's handle with this process's default options (what unpickling does, minus the
    builder's options)."""
    # The options object, not `.options()`: that would bind the handle's router now, in the constructor.
    options = DynamicHandleOptions(request_serialization="pickle", response_serialization="pickle")
    return DeploymentHandle(handle.deployment_name, handle.app_name, handle_options=options)
