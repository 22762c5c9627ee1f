"""The local cluster runs the generator's Serve config: only the documented substitutions differ."""

from __future__ import annotations

from agentserve.deploy.k8s import serve_config
from agentserve.deploy.local_cluster import local_config, local_values


def test_only_the_documented_fields_differ_from_the_generated_config():
    values = local_values()
    generated = serve_config(values)
    local = local_config(values, port=18000, dsn="host=/tmp/pg", engine={"rules": [{"match": "", "reply": "ok"}]})
    (gen_app,), (loc_app,) = generated["applications"], local["applications"]
    # Every deployment as generated: replicas, autoscaling, CPU and GPU resources, placement groups, drain times.
    assert loc_app["deployments"] == gen_app["deployments"]
    assert {k: v for k, v in loc_app["args"].items() if k not in ("model", "engine")} == \
        {k: v for k, v in gen_app["args"].items() if k not in ("model", "engine")}
    assert loc_app["args"]["state"]["backend"] == "postgres"
    assert loc_app["args"]["engine"]["kind"] == "scripted"
    assert local["proxy_location"] == "HeadOnly" and local["http_options"]["host"] == "127.0.0.1"
    assert local["http_options"]["request_timeout_s"] == generated["http_options"]["request_timeout_s"]
    env = loc_app["runtime_env"]["env_vars"]
    assert env["AGENTSERVE_POSTGRES_DSN"] == "host=/tmp/pg" and len(env["AGENTSERVE_SECRET_KEY"]) >= 32
    # The engines' placement groups ask for what a GPU pod node of the local cluster has.
    (engine,) = [d for d in loc_app["deployments"] if d["name"] == "Engine"]
    gpus = sum(b["GPU"] for b in engine["placement_group_bundles"])
    cpus = sum(b["CPU"] for b in engine["placement_group_bundles"])
    assert gpus == values.gpu_workers.gpus_per_pod and cpus == gpus * values.cpus_per_gpu_bundle
