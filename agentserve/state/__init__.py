"""State that outlives a process: the Responses store, per-key limits and the secret key.

No Ray and no wire-API imports: `serve/` wraps these for the deployments, `apis/` keeps its own shapes.
Two backends behind one interface (backend.py): SQLite under a data directory (the embedded default, no
server) and PostgreSQL (clusters). secrets.py resolves the signing key.
"""

from agentserve.state.backend import LeaseGrant, StateBackend, StoreBounds, TokenGrant
from agentserve.state.open import StateConfigError, data_dir, open_backend, postgres_dsn

__all__ = [
    "LeaseGrant",
    "StateBackend",
    "StateConfigError",
    "StoreBounds",
    "TokenGrant",
    "data_dir",
    "open_backend",
    "postgres_dsn",
]
