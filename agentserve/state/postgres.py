"""PostgreSQL state backend, for clusters: every replica on every node shares one database.

A psycopg connection pool (thread-safe, checks connections before handing them out, so a restarted server
costs one failed request at most). Transactions that must not interleave take a transaction-scoped advisory
lock named after what they change (one key's bucket, one lease scope, the store while it evicts), so they
serialize per resource without locking whole tables.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from psycopg_pool import ConnectionPool

from agentserve.state.sql import SqlBackend, Tx, schema

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
    def __init__(self, dsn: str, *, max_connections: int = 8, connect_timeout_s: float = 30.0) -> None:
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max_connections,
            open=False,
            check=ConnectionPool.check_connection,
            name="agentserve-state",
        )
        self._pool.open(wait=True, timeout=connect_timeout_s)  # a wrong DSN fails here, at start, not per request
        with self._tx(_SCHEMA_LOCK) as tx:
            for stmt in schema(blob="BYTEA", real="DOUBLE PRECISION", integer="BIGINT"):
                tx.execute(stmt)

    @contextmanager
    def _tx(self, lock: str | None = None) -> Iterator[Tx]:
        with self._pool.connection() as conn, conn.transaction():
            tx = _PgTx(conn)
            if lock is not None:
                tx.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (lock,))
            yield tx

    def close(self) -> None:
        self._pool.close()
