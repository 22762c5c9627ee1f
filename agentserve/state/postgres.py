"""PostgreSQL state backend, for clusters: every replica on every node shares one database.

A psycopg connection pool (thread-safe, checks connections before handing them out, so a restarted server
costs one failed request at most), small and one per process (state/open.py shares it between the store, the
kept turns and the limits): at the k8s maxima every replica's pool together must stay under the server's
max_connections (docs/OPERATIONS.md). Transactions that must not interleave take a transaction-scoped advisory
lock named after what they change (one key's bucket, one lease scope, the store while it evicts), so they
serialize per resource without locking whole tables.

An unreachable server does not fail a replica's start-up: stateless traffic needs no database. The pool keeps
connecting in the background, the schema is made by the first transaction that gets a connection, and until
then each call that needs state fails alone (and its caller falls back: see the callers).
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from psycopg_pool import ConnectionPool, PoolTimeout

from agentserve.state.sql import SqlBackend, Tx, init_totals, schema

logger = logging.getLogger("ray.serve")

_SCHEMA_LOCK = "agentserve:schema"  # concurrent CREATE ... IF NOT EXISTS can still collide in the catalog


class _PgTx:
    """Tx over a psycopg connection: `?` placeholders become `%s`."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql.replace("?", "%s"), params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(sql.replace("?", "%s"), rows)


class PostgresBackend(SqlBackend):
    def __init__(self, dsn: str, *, max_connections: int = 4, connect_timeout_s: float = 10.0) -> None:
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max_connections,
            open=False,
            timeout=connect_timeout_s,  # how long a call waits for a connection before it fails
            check=ConnectionPool.check_connection,
            name="agentserve-state",
        )
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._pool.open(wait=False)
        try:
            self._pool.wait(timeout=connect_timeout_s)
            self._ensure_schema()
        except PoolTimeout:
            logger.warning(
                "state: PostgreSQL is unreachable (%.0fs); starting without it: stored responses, kept turns and "
                "per-key limits degrade until it answers", connect_timeout_s,
            )

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if self._schema_ready:
                return
            with self._pool.connection() as conn, conn.transaction():
                tx = _PgTx(conn)
                tx.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (_SCHEMA_LOCK,))
                for stmt in schema(blob="BYTEA", real="DOUBLE PRECISION", integer="BIGINT"):
                    tx.execute(stmt)
                init_totals(tx)
            self._schema_ready = True

    @contextmanager
    def _tx(self, lock: str | None = None) -> Iterator[Tx]:
        self._ensure_schema()
        with self._pool.connection() as conn, conn.transaction():
            tx = _PgTx(conn)
            if lock is not None:
                tx.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (lock,))
            yield tx

    def close(self) -> None:
        self._pool.close()
