"""Settle, once at build time, the parts of ServeArgs that must be the same in every replica and outlive them.

The data directory is pinned to an absolute path (so every replica opens the same SQLite file whatever its
environment) and the secret key is resolved (agentserve/state/secrets.py), with the previous keys from the
environment added. Each replica then reads them from its args. This is the Ray-aware part: it counts the
cluster's nodes, so a multi-node cluster refuses a generated key.
"""

from __future__ import annotations

import logging
import os
from typing import Mapping

from agentserve.config import ServeArgs
from agentserve.state import data_dir
from agentserve.state.secrets import resolve_secret_keys

logger = logging.getLogger("ray.serve")


def ray_multi_node() -> bool:
    """More than one live node in the Ray cluster this process is connected to (False when not connected)."""
    import ray

    if not ray.is_initialized():
        return False
    return sum(1 for n in ray.nodes() if n.get("Alive")) > 1


def settle_state(args: ServeArgs, env: Mapping[str, str] = os.environ, *, multi_node: bool | None = None) -> ServeArgs:
    """args with state.data_dir absolute, secret_key set and previous_secret_keys complete."""
    directory = data_dir(args.state, env)
    keys = resolve_secret_keys(
        args.secret_key,
        args.previous_secret_keys,
        data_dir=directory,
        multi_node=ray_multi_node() if multi_node is None else multi_node,
        allow_generated=args.allow_generated_secret_key,
        env=env,
    )
    if keys.source == "file":
        logger.info("secret key: generated once and kept in %s", directory)
    state = args.state.model_copy(update={"data_dir": str(directory)})
    return args.model_copy(update={"state": state, "secret_key": keys.current, "previous_secret_keys": keys.previous})
