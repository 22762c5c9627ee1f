"""Choose and open the configured state backend (ServeArgs.state)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

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
    """Open (and create the schema of) the backend `spec` names. Blocking: call it off the event loop.

    PostgreSQL: one pool per process and DSN, shared by every caller here (the store, the kept turns, the limits)
    and closed with the last of them, so a replica holds at most `state.postgres_pool_size` connections."""
    if spec.backend == "postgres":
        return _shared_postgres(postgres_dsn(spec, env), spec.postgres_pool_size, spec.postgres_connect_timeout_s)
    from agentserve.state.sqlite import SQLiteBackend

    return SQLiteBackend(data_dir(spec, env) / SQLITE_FILE)


class _SharedBackend:
    """One user's handle on a process-wide backend: every call goes to it; `close` lets go of this handle only."""

    def __init__(self, backend: Any, release: Callable[[], None]) -> None:
        self._backend = backend
        self._release: Callable[[], None] | None = release

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


_pools: dict[str, list[Any]] = {}  # dsn -> [backend, handles open]
_pools_lock = threading.Lock()


def _shared_postgres(dsn: str, pool_size: int, connect_timeout_s: float) -> StateBackend:
    from agentserve.state.postgres import PostgresBackend  # psycopg only where it is used

    with _pools_lock:
        entry = _pools.get(dsn)
        if entry is None:
            entry = _pools[dsn] = [PostgresBackend(dsn, max_connections=pool_size, connect_timeout_s=connect_timeout_s), 0]
        entry[1] += 1

    def release() -> None:
        with _pools_lock:
            entry[1] -= 1
            if entry[1] == 0 and _pools.get(dsn) is entry:
                del _pools[dsn]
                entry[0].close()

    return _SharedBackend(entry[0], release)  # type: ignore[return-value]
