"""build_app: the `import_path` target of serve_config.yaml."""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from agentserve.config import ServeArgs
from agentserve.ingress.middleware.auth import keys_from_env
from agentserve.serve.deployments.engine import EngineReplica
from agentserve.serve.deployments.ingress import Ingress
from agentserve.serve.deployments.preprocessor import PreprocessorReplica
from agentserve.serve.deployments.router import RouterReplica
from agentserve.serve.state_args import settle_state


def build_app(args: dict[str, Any] | None = None) -> Application:
    """Ingress -> Preprocessor -> Router -> Engine replicas, wired as Ray Serve deployments: one Engine
    deployment per catalog model (each scaled on its own), one Ingress, Preprocessor and Router for all."""
    parsed = ServeArgs.from_any(args)
    parsed = settle_state(parsed)  # secret key (config, env, or kept in the data dir) and data dir, for every replica
    env_keys = keys_from_env()  # AGENTSERVE_API_KEYS: plain keys, only their digests go into the config
    if env_keys:
        parsed = parsed.model_copy(update={"api_keys": tuple(dict.fromkeys((*parsed.api_keys, *env_keys)))})
    config = parsed.model_dump(mode="json")
    resolved = parsed.resolve_catalog()  # past this line nothing knows the config's form (`model:` or `models:`)
    catalog = resolved.model_dump(mode="json")
    router = RouterReplica.bind(config, catalog)
    engines = {}
    for model, name in zip(resolved.models, resolved.engine_deployments, strict=True):
        engine = resolved.engine(model.id)
        options: dict[str, Any] = {"name": name}
        if engine.num_replicas is not None:  # serve config `deployments` still override this
            options["num_replicas"] = engine.num_replicas
        engines[model.id] = EngineReplica.options(**options).bind(config, catalog, router, model.id)
    preprocessor = PreprocessorReplica.bind(config, catalog)
    return Ingress.bind(config, catalog, preprocessor, router, engines)
