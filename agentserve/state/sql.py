"""The state backend's logic in SQL both SQLite and PostgreSQL run; a dialect supplies connections and DDL.

Statements use `?` placeholders (the PostgreSQL dialect rewrites them). Every change is one transaction that
the dialect serializes where it matters: SQLite takes the database write lock (BEGIN IMMEDIATE), PostgreSQL an
advisory lock on the named resource (a key's bucket or lease scope, or the store while it evicts). Reads
(`_read`) take no write lock: under SQLite's WAL they run beside a writer instead of queueing behind it (and
failing with "database is locked" once the busy timeout is spent).

Recency for LRU eviction is a logical counter (`used`), not a time: many entries can share one clock reading.

Each store's entry count and byte total live in one row of `TOTALS`, changed in the same transaction as the rows
(every insert, replace and delete accounts for itself; deletes read the sizes back with RETURNING). Checking the
bounds on every write by `COUNT(*), SUM(size)` instead scanned the whole table, and in SQLite reading `size` past an
overflowing `body` reads the body too: a kept-turn write cost grew with everything kept, and at a few thousand
entries it was a sixth of the Ingress's CPU. The row is filled from a scan once, when the table is new to it, and
set from one again by `recount_totals`, rare background upkeep (state/upkeep.py), so what a writer that does not
keep it changed (a replica of an earlier version during an upgrade, a hand edit) cannot accumulate.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any, Protocol, Sequence

from agentserve.state.backend import LeaseGrant, StoreBounds, TokenGrant

logger = logging.getLogger("ray.serve")

RESPONSES = "agentserve_responses"
LEASES = "agentserve_leases"
BUCKETS = "agentserve_buckets"
KEPT = "agentserve_kept_turns"
HEADS = "agentserve_session_heads"
TOTALS = "agentserve_store_totals"


class Tx(Protocol):
    """One open transaction: run statements, read rows."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...


def schema(blob: str, real: str, integer: str) -> list[str]:
    """DDL with the dialect's type names; idempotent."""
    return [
        f"CREATE TABLE IF NOT EXISTS {RESPONSES} (id TEXT PRIMARY KEY, owner TEXT NOT NULL, body {blob} NOT NULL,"
        f" size {integer} NOT NULL, used {integer} NOT NULL, expires_at {real} NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {RESPONSES}_used ON {RESPONSES} (used)",
        f"CREATE INDEX IF NOT EXISTS {RESPONSES}_expires ON {RESPONSES} (expires_at)",
        f"CREATE INDEX IF NOT EXISTS {RESPONSES}_owner ON {RESPONSES} (owner, used)",
        f"CREATE TABLE IF NOT EXISTS {LEASES} (id TEXT PRIMARY KEY, scope TEXT NOT NULL, expires_at {real} NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {LEASES}_scope ON {LEASES} (scope, expires_at)",
        f"CREATE INDEX IF NOT EXISTS {LEASES}_expires ON {LEASES} (expires_at)",
        f"CREATE TABLE IF NOT EXISTS {BUCKETS} (key TEXT PRIMARY KEY, tokens {real} NOT NULL, stamp {real} NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {BUCKETS}_stamp ON {BUCKETS} (stamp)",
        f"CREATE TABLE IF NOT EXISTS {KEPT} (key TEXT PRIMARY KEY, body {blob} NOT NULL, size {integer} NOT NULL,"
        f" used {integer} NOT NULL, expires_at {real} NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {KEPT}_used ON {KEPT} (used)",
        f"CREATE INDEX IF NOT EXISTS {KEPT}_expires ON {KEPT} (expires_at)",
        f"CREATE TABLE IF NOT EXISTS {HEADS} (session TEXT PRIMARY KEY, model TEXT NOT NULL, head {blob} NOT NULL,"
        f" used {integer} NOT NULL, expires_at {real} NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {HEADS}_model ON {HEADS} (model, used)",
        f"CREATE TABLE IF NOT EXISTS {TOTALS} (store TEXT PRIMARY KEY, entries {integer} NOT NULL,"
        f" bytes {integer} NOT NULL)",
    ]


def init_totals(tx: Tx) -> None:
    """Fill a store's totals row from its table the first time (a database an older version wrote); after that
    every change keeps it. Run with the schema, in its transaction."""
    for store in (RESPONSES, KEPT):
        if tx.execute(f"SELECT 1 FROM {TOTALS} WHERE store = ?", (store,)).fetchone() is None:
            count, total = tx.execute(f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM {store}").fetchone()
            tx.execute(f"INSERT INTO {TOTALS} (store, entries, bytes) VALUES (?, ?, ?)", (store, count, total))


def _account(tx: Tx, store: str, entries: int, nbytes: int) -> None:
    if entries or nbytes:
        tx.execute(
            f"UPDATE {TOTALS} SET entries = entries + ?, bytes = bytes + ? WHERE store = ?", (entries, nbytes, store)
        )


def _totals(tx: Tx, store: str) -> tuple[int, int]:
    row = tx.execute(f"SELECT entries, bytes FROM {TOTALS} WHERE store = ?", (store,)).fetchone()
    return (int(row[0]), int(row[1])) if row is not None else (0, 0)


def _delete(tx: Tx, store: str, sql: str, params: Sequence[Any] = ()) -> int:
    """Run `DELETE FROM store ...` and account for what went; the number of rows deleted."""
    sizes = tx.execute(f"{sql} RETURNING size", params).fetchall()
    _account(tx, store, -len(sizes), -sum(int(n) for (n,) in sizes))
    return len(sizes)


def _replaced(tx: Tx, store: str, key_column: str, keys: Sequence[str]) -> tuple[int, int]:
    """(entries, bytes) of the rows an upsert of `keys` replaces."""
    if not keys:
        return 0, 0
    marks = ", ".join("?" for _ in keys)
    sizes = tx.execute(f"SELECT size FROM {store} WHERE {key_column} IN ({marks})", tuple(keys)).fetchall()
    return len(sizes), sum(int(n) for (n,) in sizes)


class SqlBackend(ABC):
    """StateBackend over a SQL dialect; subclasses implement `_tx`."""

    @abstractmethod
    def _tx(self, lock: str | None = None) -> AbstractContextManager[Tx]:
        """A transaction, committed on normal exit; `lock` names what it must hold exclusively."""

    def _read(self) -> AbstractContextManager[Tx]:
        """Where SELECTs run: a snapshot that takes no write lock (a dialect whose `_tx` does not lock says so)."""
        return self._tx()

    # -- Responses store ---------------------------------------------------------------------------------
    def put_response(self, response_id: str, owner: str, body: bytes, now: float, bounds: StoreBounds) -> bool:
        size = len(body)
        own_bytes = min(bounds.max_bytes, bounds.max_bytes_per_owner or bounds.max_bytes)
        if size > own_bytes:
            return False
        with self._tx("responses") as tx:
            _delete(tx, RESPONSES, f"DELETE FROM {RESPONSES} WHERE expires_at <= ?", (now,))
            old_n, old_b = _replaced(tx, RESPONSES, "id", (response_id,))
            tx.execute(
                f"INSERT INTO {RESPONSES} (id, owner, body, size, used, expires_at)"
                f" VALUES (?, ?, ?, ?, (SELECT COALESCE(MAX(used), 0) + 1 FROM {RESPONSES}), ?)"
                " ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, body = excluded.body,"
                " size = excluded.size, used = excluded.used, expires_at = excluded.expires_at",
                (response_id, owner, body, size, now + bounds.ttl_s),
            )
            _account(tx, RESPONSES, 1 - old_n, size - old_b)
            if bounds.max_entries_per_owner is not None or bounds.max_bytes_per_owner is not None:
                # The owner's own quota: its most recently used entries that fit (the new one is the most recent).
                _delete(
                    tx, RESPONSES,
                    f"DELETE FROM {RESPONSES} WHERE id IN (SELECT id FROM (SELECT id,"
                    " COUNT(*) OVER (ORDER BY used DESC) AS n, SUM(size) OVER (ORDER BY used DESC) AS b"
                    f" FROM {RESPONSES} WHERE owner = ?) AS ranked WHERE n > ? OR b > ?)",
                    (owner, bounds.max_entries_per_owner or bounds.max_entries, own_bytes),
                )
            self._evict_heaviest_owners(tx, response_id, bounds)
        return True

    def _evict_heaviest_owners(self, tx: Tx, keep: str, bounds: StoreBounds) -> None:
        """Past the store's caps, the owner holding the most bytes loses its least recently used entries first
        (never `keep`, the entry just stored), so one key's traffic evicts its own entries before anyone else's."""
        while True:
            count, total = _totals(tx, RESPONSES)
            over_n, over_b = count - bounds.max_entries, total - bounds.max_bytes
            if over_n <= 0 and over_b <= 0:
                return
            row = tx.execute(
                f"SELECT owner FROM {RESPONSES} WHERE id <> ? GROUP BY owner"
                " ORDER BY SUM(size) DESC, COUNT(*) DESC, owner LIMIT 1",
                (keep,),
            ).fetchone()
            if row is None:
                return
            # Its oldest entries, until what goes covers what is over (a row goes while the rows before it do not).
            _delete(
                tx, RESPONSES,
                f"DELETE FROM {RESPONSES} WHERE id IN (SELECT id FROM (SELECT id,"
                " COUNT(*) OVER (ORDER BY used ASC) - 1 AS n_before, SUM(size) OVER (ORDER BY used ASC) - size AS b_before"
                f" FROM {RESPONSES} WHERE owner = ? AND id <> ?) AS ranked WHERE n_before < ? OR b_before < ?)",
                (row[0], keep, max(over_n, 0), max(over_b, 0)),
            )

    def get_response(self, response_id: str, owner: str, now: float, ttl_s: float) -> bytes | None:
        with self._read() as tx:
            row = tx.execute(
                f"SELECT body FROM {RESPONSES} WHERE id = ? AND owner = ? AND expires_at > ?", (response_id, owner, now)
            ).fetchone()
        if row is None:
            return None
        try:  # recency and lifetime: worth a write, not worth failing the read over
            with self._tx() as tx:
                tx.execute(
                    f"UPDATE {RESPONSES} SET used = (SELECT MAX(used) + 1 FROM {RESPONSES}), expires_at = ?"
                    " WHERE id = ? AND owner = ?",
                    (now + ttl_s, response_id, owner),
                )
        except Exception:  # noqa: BLE001 - e.g. "database is locked": the entry was read all the same
            logger.warning("responses: could not refresh the recency of a stored response", exc_info=True)
        return bytes(row[0])

    def delete_response(self, response_id: str, owner: str, now: float) -> bool:
        with self._tx() as tx:
            return _delete(
                tx, RESPONSES, f"DELETE FROM {RESPONSES} WHERE id = ? AND owner = ? AND expires_at > ?",
                (response_id, owner, now),
            ) > 0

    def response_stats(self, now: float) -> tuple[int, int]:
        with self._read() as tx:
            count, total = tx.execute(
                f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM {RESPONSES} WHERE expires_at > ?", (now,)
            ).fetchone()
        return int(count), int(total)

    # -- kept turns: generated tokens by content key, written in batches -------------------------------------
    def put_kept_turns(self, rows: Sequence[tuple[str, bytes]], now: float, bounds: StoreBounds) -> int:
        rows = [(k, b) for k, b in rows if len(b) <= bounds.max_bytes]
        if not rows:
            return 0
        with self._tx("kept") as tx:
            (top,) = tx.execute(f"SELECT COALESCE(MAX(used), 0) FROM {KEPT}").fetchone()
            unique = dict(rows)  # one row per key, the last written (as the upserts leave it)
            old_n, old_b = _replaced(tx, KEPT, "key", list(unique))
            tx.executemany(
                f"INSERT INTO {KEPT} (key, body, size, used, expires_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET body = excluded.body, size = excluded.size,"
                " used = excluded.used, expires_at = excluded.expires_at",
                [(k, b, len(b), int(top) + 1 + i, now + bounds.ttl_s) for i, (k, b) in enumerate(rows)],
            )
            _account(tx, KEPT, len(unique) - old_n, sum(map(len, unique.values())) - old_b)
            _delete(tx, KEPT, f"DELETE FROM {KEPT} WHERE expires_at <= ?", (now,))
            count, total = _totals(tx, KEPT)
            if count > bounds.max_entries or total > bounds.max_bytes:
                # Down to 90% of the bounds: a full store evicts once per tenth of its size, not on every batch.
                _delete(
                    tx, KEPT,
                    f"DELETE FROM {KEPT} WHERE key IN (SELECT key FROM (SELECT key,"
                    " COUNT(*) OVER (ORDER BY used DESC) AS n, SUM(size) OVER (ORDER BY used DESC) AS b"
                    f" FROM {KEPT}) AS ranked WHERE n > ? OR b > ?)",
                    (max(1, bounds.max_entries * 9 // 10), max(1, bounds.max_bytes * 9 // 10)),
                )
        return len(rows)

    def get_kept_turns(self, keys: Sequence[str], now: float) -> dict[str, bytes]:
        if not keys:
            return {}
        marks = ", ".join("?" for _ in keys)
        with self._read() as tx:
            rows = tx.execute(
                f"SELECT key, body FROM {KEPT} WHERE key IN ({marks}) AND expires_at > ?", (*keys, now)
            ).fetchall()
        return {k: bytes(b) for k, b in rows}

    def touch_kept_turns(self, keys: Sequence[str], now: float, ttl_s: float) -> None:
        if not keys:
            return
        with self._tx("kept") as tx:
            (top,) = tx.execute(f"SELECT COALESCE(MAX(used), 0) FROM {KEPT}").fetchone()
            tx.executemany(
                f"UPDATE {KEPT} SET used = ?, expires_at = ? WHERE key = ?",
                [(int(top) + 1 + i, now + ttl_s, k) for i, k in enumerate(keys)],
            )

    def kept_turn_stats(self, now: float) -> tuple[int, int]:
        with self._read() as tx:
            count, total = tx.execute(
                f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM {KEPT} WHERE expires_at > ?", (now,)
            ).fetchone()
        return int(count), int(total)

    # -- session heads: each session's latest kept turn, for warm starts -----------------------------------
    def put_session_heads(
        self, rows: Sequence[tuple[str, str, bytes]], now: float, max_entries: int, ttl_s: float
    ) -> None:
        if not rows:
            return
        with self._tx("heads") as tx:
            (top,) = tx.execute(f"SELECT COALESCE(MAX(used), 0) FROM {HEADS}").fetchone()
            tx.executemany(
                f"INSERT INTO {HEADS} (session, model, head, used, expires_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (session) DO UPDATE SET model = excluded.model, head = excluded.head,"
                " used = excluded.used, expires_at = excluded.expires_at",
                [(k, m, h, int(top) + 1 + i, now + ttl_s) for i, (k, m, h) in enumerate(rows)],
            )
            tx.execute(f"DELETE FROM {HEADS} WHERE expires_at <= ?", (now,))
            (count,) = tx.execute(f"SELECT COUNT(*) FROM {HEADS}").fetchone()
            if count > max_entries:  # rows of ~100 bytes: a count bounds their bytes
                tx.execute(
                    f"DELETE FROM {HEADS} WHERE used <= (SELECT used FROM {HEADS} ORDER BY used DESC"
                    " LIMIT 1 OFFSET ?)", (max_entries,),
                )

    def session_heads(self, model: str, limit: int, now: float) -> list[bytes]:
        with self._read() as tx:
            rows = tx.execute(
                f"SELECT head FROM {HEADS} WHERE model = ? AND expires_at > ? ORDER BY used DESC LIMIT ?",
                (model, now, limit),
            ).fetchall()
        return [bytes(h) for (h,) in rows]

    # -- leases ------------------------------------------------------------------------------------------
    def acquire_lease(self, scope: str, lease_id: str, limit: int, now: float, ttl_s: float) -> LeaseGrant:
        with self._tx(f"lease:{scope}") as tx:
            tx.execute(f"DELETE FROM {LEASES} WHERE scope = ? AND expires_at <= ?", (scope, now))
            (held,) = tx.execute(f"SELECT COUNT(*) FROM {LEASES} WHERE scope = ?", (scope,)).fetchone()
            if held >= limit:
                return LeaseGrant(False, int(held))
            tx.execute(f"INSERT INTO {LEASES} (id, scope, expires_at) VALUES (?, ?, ?)", (lease_id, scope, now + ttl_s))
        return LeaseGrant(True, int(held) + 1)

    def renew_leases(self, lease_ids: Sequence[str], now: float, ttl_s: float) -> None:
        if not lease_ids:
            return
        with self._tx() as tx:
            tx.executemany(f"UPDATE {LEASES} SET expires_at = ? WHERE id = ?", [(now + ttl_s, i) for i in lease_ids])

    def release_lease(self, lease_id: str) -> None:
        with self._tx() as tx:
            tx.execute(f"DELETE FROM {LEASES} WHERE id = ?", (lease_id,))

    def count_leases(self, scope: str, now: float) -> int:
        with self._read() as tx:
            (n,) = tx.execute(
                f"SELECT COUNT(*) FROM {LEASES} WHERE scope = ? AND expires_at > ?", (scope, now)
            ).fetchone()
        return int(n)

    # -- token buckets -----------------------------------------------------------------------------------
    def take_token(self, key: str, now: float, rate_per_s: float, burst: float) -> TokenGrant:
        with self._tx(f"bucket:{key}") as tx:
            row = tx.execute(f"SELECT tokens, stamp FROM {BUCKETS} WHERE key = ?", (key,)).fetchone()
            tokens = burst if row is None else min(burst, row[0] + max(0.0, now - row[1]) * rate_per_s)
            granted = tokens >= 1.0
            tx.execute(
                f"INSERT INTO {BUCKETS} (key, tokens, stamp) VALUES (?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens, stamp = excluded.stamp",
                (key, tokens - 1.0 if granted else tokens, now),
            )
        if granted:
            return TokenGrant(True, 0.0)
        return TokenGrant(False, (1.0 - tokens) / rate_per_s if rate_per_s > 0 else float("inf"))

    # -- upkeep --------------------------------------------------------------------------------------------
    def recount_totals(self) -> dict[str, tuple[int, int]]:
        """Set each store's totals row from a scan of its rows; returns how far off each drifted row was (entries,
        bytes; stores that were right are not in it). One transaction per store, which first takes the totals
        row's lock (the touch), so every concurrent writer of that store either committed before the scan (and it
        counts) or accounts for itself after this commits (its uncommitted rows are not counted)."""
        drift: dict[str, tuple[int, int]] = {}
        for store in (RESPONSES, KEPT):
            with self._tx() as tx:
                tx.execute(f"UPDATE {TOTALS} SET entries = entries WHERE store = ?", (store,))
                kept = _totals(tx, store)
                count, total = (int(v) for v in tx.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM {store}").fetchone())  # fmt: skip
                if kept != (count, total):
                    tx.execute(f"UPDATE {TOTALS} SET entries = ?, bytes = ? WHERE store = ?", (count, total, store))
                    drift[store] = (kept[0] - count, kept[1] - total)
        return drift

    def prune(self, now: float, buckets_idle_s: float) -> None:
        with self._tx() as tx:
            tx.execute(f"DELETE FROM {LEASES} WHERE expires_at <= ?", (now,))
            _delete(tx, RESPONSES, f"DELETE FROM {RESPONSES} WHERE expires_at <= ?", (now,))
            _delete(tx, KEPT, f"DELETE FROM {KEPT} WHERE expires_at <= ?", (now,))
            tx.execute(f"DELETE FROM {HEADS} WHERE expires_at <= ?", (now,))
            tx.execute(f"DELETE FROM {BUCKETS} WHERE stamp < ?", (now - buckets_idle_s,))
