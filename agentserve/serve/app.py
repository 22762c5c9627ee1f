"""build_app: the `import_path` target of serve_config.yaml."""

from __future__ import annotations

import logging
from typing import Any

from ray.serve import Application

from agentserve.config import ServeArgs
from agentserve.ingress.middleware.auth import ADMIN_ENV_VAR, keys_from_env
from agentserve.serve.deployments.engine import EngineReplica
from agentserve.serve.deployments.ingress import Ingress
from agentserve.serve.deployments.preprocessor import PreprocessorReplica
from agentserve.serve.deployments.router import RouterReplica
from agentserve.serve.state_args import settle_state, without_credentials

logger = logging.getLogger("ray.serve")

DEFAULT_HTTP_HOST = "127.0.0.1"  # Serve's own default, what a Serve started after this build listens on


def serve_http_host() -> str:
    """The host the running Serve instance's HTTP proxy (and, in HAProxy mode, every Ingress replica) binds: the
    serve config's `http_options.host`, as the controller holds it. No controller yet (`serve.run` of this app in a
    fresh process): Serve starts with its default, loopback."""
    import ray

    if not ray.is_initialized():
        return DEFAULT_HTTP_HOST
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    if client is None:
        return DEFAULT_HTTP_HOST
    options = ray.get(client._controller.get_http_config.remote())  # fresh: Serve may have restarted with others
    return str(options.host or DEFAULT_HTTP_HOST)


def _with_env_keys(parsed: ServeArgs) -> ServeArgs:
    """AGENTSERVE_API_KEYS and AGENTSERVE_ADMIN_KEYS: plain keys, only their digests go into the config."""
    api, admin = keys_from_env(), keys_from_env(var=ADMIN_ENV_VAR)
    update: dict[str, Any] = {}
    if api:
        update["api_keys"] = tuple(dict.fromkeys((*parsed.api_keys, *api)))
    if admin:
        update["admin"] = parsed.admin.model_copy(update={"keys": tuple(dict.fromkeys((*parsed.admin.keys, *admin)))})
    return parsed.model_copy(update=update) if update else parsed


def build_app(args: dict[str, Any] | None = None) -> Application:
    """Ingress -> Preprocessor -> Router -> Engine replicas, wired as Ray Serve deployments: one Engine
    deployment per catalog model (each scaled on its own), one Ingress, Preprocessor and Router for all.

    Refuses a non-loopback HTTP host without API keys (ServeArgs.check_exposure). Each deployment gets only the
    credentials it uses: the secret key is read by the Ingress when it starts, a configured DSN goes only to the
    deployments that open the state backend (state_args.py)."""
    parsed = _with_env_keys(ServeArgs.from_any(args))
    parsed.check_exposure(serve_http_host())
    parsed = settle_state(parsed)  # data dir pinned, secret key checked (never bound, but where it must be)
    resolved = parsed.resolve_catalog()  # past this line nothing knows the config's form (`model:` or `models:`)
    catalog = resolved.model_dump(mode="json")

    def config(*, secret: bool = False, state: bool = False) -> dict[str, Any]:
        given = parsed if secret else without_credentials(parsed, state=state)
        return given.model_dump(mode="json")

    router = RouterReplica.options(num_replicas=parsed.router.replicas).bind(config(), catalog)
    engines = {}
    for model, name in zip(resolved.models, resolved.engine_deployments, strict=True):
        engine = resolved.engine(model.id)
        options: dict[str, Any] = {"name": name}
        if engine.num_replicas is not None:  # serve config `deployments` still override this
            options["num_replicas"] = engine.num_replicas
        engines[model.id] = EngineReplica.options(**options).bind(config(), catalog, router, model.id)
    preprocessor = PreprocessorReplica.bind(config(state=True), catalog)
    return Ingress.bind(config(secret=True, state=True), catalog, preprocessor, router, engines)
