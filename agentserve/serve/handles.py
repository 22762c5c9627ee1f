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

import contextvars
import dataclasses
from typing import Any

from ray.serve._private.handle_options import DynamicHandleOptions
from ray.serve.handle import DeploymentHandle, DeploymentResponse


def on_this_process(handle: DeploymentHandle) -> DeploymentHandle:
    """The same deployment's handle with this process's default options (what unpickling does, minus the
    builder's options)."""
    # The options object, not `.options()`: that would bind the handle's router now, in the constructor.
    options = DynamicHandleOptions(request_serialization="pickle", response_serialization="pickle")
    return DeploymentHandle(handle.deployment_name, handle.app_name, handle_options=options)


def separate_call(handle: DeploymentHandle, method: str, *args: Any) -> DeploymentResponse:
    """`handle.method.remote(*args)` as a call of its own to Serve's request router.

    A call made inside a request inherits that request's internal id, and Serve's request router keys its pending
    calls by that id: two calls from one request pending at once on one deployment's handle (the same signal to
    every Router replica) leave the second out of its index, and the routing task that picks a replica for it can
    never hand it over, so it loops without yielding and freezes every handle call of the process (found with two
    Router replicas: a GPU pod's death stalled every stream of the Ingress). The call keeps the request id (logs)
    and gets an internal id of its own.
    """
    return contextvars.copy_context().run(_remote_with_own_id, handle, method, args)


def _remote_with_own_id(handle: DeploymentHandle, method: str, args: tuple[Any, ...]) -> DeploymentResponse:
    from ray.serve import context
    from ray.serve._private.utils import generate_request_id

    current = context._get_serve_request_context()
    context._serve_request_context.set(dataclasses.replace(current, _internal_request_id=generate_request_id()))
    return getattr(handle, method).remote(*args)
