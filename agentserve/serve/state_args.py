"""Settle, once at build time, the parts of ServeArgs that must be the same in every replica and outlive them, and
keep the credentials out of the deployments that do not use them.

The data directory is pinned to an absolute path (so every replica opens the same SQLite file whatever its
environment) and the secret key is checked (agentserve/state/secrets.py): a Kubernetes or multi-node cluster
refuses a generated one here, before anything is deployed. The key itself is not put into the args: Serve keeps
every deployment's init args in its checkpoint (and shows them to whoever can read the controller), so the Ingress,
the only deployment that signs and seals, reads it where it lives (env, the key file, or the operator's own config)
when its replica starts. The PostgreSQL DSN is read the same way (open_backend reads AGENTSERVE_POSTGRES_DSN), and a
DSN written into the config reaches only the deployments that open the state backend (Ingress, Preprocessor).
This is the Ray-aware part: it counts the cluster's nodes.
"""

from __future__ import annotations

import logging
import os
from typing import Mapping

from agentserve.config import ServeArgs
from agentserve.state import data_dir
from agentserve.state.secrets import SecretKeys, resolve_secret_keys

logger = logging.getLogger("ray.serve")


def ray_multi_node() -> bool:
    """More than one live node in the Ray cluster this process is connected to (False when not connected)."""
    import ray

    if not ray.is_initialized():
        return False
    return sum(1 for n in ray.nodes() if n.get("Alive")) > 1


def _resolve(args: ServeArgs, env: Mapping[str, str], multi_node: bool | None) -> SecretKeys:
    return resolve_secret_keys(
        args.secret_key,
        args.previous_secret_keys,
        data_dir=data_dir(args.state, env),
        multi_node=ray_multi_node() if multi_node is None else multi_node,
        allow_generated=args.allow_generated_secret_key,
        env=env,
    )


def settle_state(args: ServeArgs, env: Mapping[str, str] = os.environ, *, multi_node: bool | None = None) -> ServeArgs:
    """args with state.data_dir absolute and the secret key checked (GeneratedKeyRefused where a generated one
    cannot work; a generated one is created now, so every replica of this node reads the same file). The key stays
    where it is unless it is a generated key on a multi-node cluster (allowed explicitly): other nodes cannot read
    this node's file, so that one travels in the Ingress's args."""
    multi = ray_multi_node() if multi_node is None else multi_node
    keys = _resolve(args, env, multi)
    directory = data_dir(args.state, env)
    if keys.source == "file":
        logger.info("secret key: generated once and kept in %s", directory)
    update: dict[str, object] = {"state": args.state.model_copy(update={"data_dir": str(directory)})}
    if keys.source == "file" and multi:
        update["secret_key"] = keys.current
    return args.model_copy(update=update)


def secret_keys_at_start(args: ServeArgs, env: Mapping[str, str] = os.environ) -> ServeArgs:
    """The Ingress's args with the secret key and previous keys filled in, read when its replica starts (from the
    config, AGENTSERVE_SECRET_KEY / AGENTSERVE_PREVIOUS_SECRET_KEYS, or the key file in the pinned data dir)."""
    keys = _resolve(args, env, None)
    return args.model_copy(update={"secret_key": keys.current, "previous_secret_keys": keys.previous})


def without_credentials(args: ServeArgs, *, state: bool) -> ServeArgs:
    """What a deployment that neither signs nor seals gets: no secret keys; with state=False (it opens no state
    backend) no DSN either."""
    update: dict[str, object] = {"secret_key": None, "previous_secret_keys": ()}
    if not state:
        update["state"] = args.state.model_copy(update={"postgres_dsn": None})
    return args.model_copy(update=update)
