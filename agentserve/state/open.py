"""Choose and open the configured state backend (ServeArgs.state)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from agentserve.config import StateSpec
from agentserve.state.backend import StateBackend

DATA_DIR_ENV = "AGENTSERVE_DATA_DIR"
POSTGRES_DSN_ENV = "AGENTSERVE_POSTGRES_DSN"
SQLITE_FILE = "state.sqlite3"


class StateConfigError(ValueError):
    """The state configuration cannot work (say, postgres without a DSN)."""


def data_dir(spec: StateSpec, env: Mapping[str, str] = os.environ) -> Path:
    """spec.data_dir, else $AGENTSERVE_DATA_DIR, else ~/.local/share/agentserve (absolute, ~ expanded)."""
    raw = spec.data_dir or env.get(DATA_DIR_ENV) or "~/.local/share/agentserve"
    return Path(raw).expanduser().resolve()


def postgres_dsn(spec: StateSpec, env: Mapping[str, str] = os.environ) -> str:
    dsn = spec.postgres_dsn or env.get(POSTGRES_DSN_ENV)
    if not dsn:
        raise StateConfigError(
            f"state.backend is postgres but no DSN is set: give state.postgres_dsn or the {POSTGRES_DSN_ENV} env var"
        )
    return dsn


def open_backend(spec: StateSpec, env: Mapping[str, str] = os.environ) -> StateBackend:
    """Open (and create the schema of) the backend `spec` names. Blocking: call it off the event loop."""
    if spec.backend == "postgres":
        from agentserve.state.postgres import PostgresBackend  # psycopg only where it is used

        return PostgresBackend(postgres_dsn(spec, env))
    from agentserve.state.sqlite import SQLiteBackend

    return SQLiteBackend(data_dir(spec, env) / SQLITE_FILE)
