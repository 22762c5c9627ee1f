"""A replica's handles travel as its own cluster says, whoever built the application."""

import json
import os
import subprocess
import sys

from agentserve.serve import ray_env

PROBE = """
import json
from ray.serve._private.handle_options import DynamicHandleOptions
from ray.serve.handle import DeploymentHandle
from agentserve.serve.handles import on_this_process

# As unpickled in a replica: built by a driver without agentserve's environment, the handle asks for actor calls.
built_elsewhere = DeploymentHandle("Preprocessor", "agentserve", handle_options=DynamicHandleOptions(_by_reference=True))
rebuilt = on_this_process(built_elsewhere)
print(json.dumps({"name": rebuilt.deployment_name, "app": rebuilt.app_name,
                  "by_reference": rebuilt.handle_options._by_reference,
                  "serialization": [rebuilt.handle_options.request_serialization,
                                    rebuilt.handle_options.response_serialization]}))
"""


def _probe(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_replica_with_agentserves_environment_calls_over_grpc_whatever_the_builder_asked():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    got = _probe({**env, **ray_env.SERVE_ENV})
    assert got == {
        "name": "Preprocessor",
        "app": "agentserve",
        "by_reference": False,
        "serialization": ["pickle", "pickle"],  # plain pickle both ways: every message is an importable class
    }


def test_without_it_the_replica_keeps_rays_default_transport():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    assert _probe(env)["by_reference"] is True
