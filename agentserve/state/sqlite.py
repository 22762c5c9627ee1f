"""SQLite state backend: the embedded default, one file under the data directory, no server.

One connection per backend object, guarded by a lock (Ray calls sync methods from a thread pool). Several
processes of one node (every ingress and preprocessor replica) share the file: WAL mode lets readers run
beside the writer (reads run as autocommit SELECTs, never in a write transaction), BEGIN IMMEDIATE serializes
writers through SQLite's own file lock, and busy_timeout makes a writer wait for its turn instead of failing.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from agentserve.state.sql import SqlBackend, Tx, init_totals, schema

BUSY_TIMEOUT_MS = 10_000


class SQLiteBackend(SqlBackend):
    def __init__(self, path: str | Path) -> None:
        """`path` is a database file (created with its directory) or ":memory:" (this process only)."""
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        # Autocommit mode: transactions are the explicit BEGIN IMMEDIATE ... COMMIT of _tx.
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        with self._lock:
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")  # durable across process crashes in WAL mode
            with self._tx_locked() as tx:
                for stmt in schema(blob="BLOB", real="REAL", integer="INTEGER"):
                    tx.execute(stmt)
                init_totals(tx)

    @contextmanager
    def _tx_locked(self) -> Iterator[Tx]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def _tx(self, lock: str | None = None) -> Iterator[Tx]:
        # One writer at a time across processes already: `lock` needs nothing more here.
        with self._lock, self._tx_locked() as tx:
            yield tx

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        # Autocommit: each SELECT reads one WAL snapshot and takes no write lock (BEGIN IMMEDIATE would).
        with self._lock:
            yield self._conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()
