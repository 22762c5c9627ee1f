"""Quotas and state failures, tried as a noisy tenant and a failing database would: one key's traffic never evicts
another's stored responses, reads never queue behind (or fail on) a writer, a database that is down or unreachable
degrades what needs it and fails nothing else, and queued kept turns survive a graceful stop."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from typing import Iterator

import psycopg
import pytest

from agentserve.apis.responses.store import ResponseStore, StoredResponse
from agentserve.config import LimitsSpec, StateSpec
from agentserve.ingress.middleware.limits import KeyLimiter, Limits
from agentserve.ports import free_port
from agentserve.state import open_backend
from agentserve.state.backend import StoreBounds
from agentserve.state.kept_turns import KeptTurnStore
from agentserve.state.postgres import PostgresBackend
from agentserve.state.sqlite import SQLiteBackend
from agentserve.deploy.local_postgres import postgres_server
from tests.support.keys import signing_key


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    if request.param == "sqlite":
        b = SQLiteBackend(tmp_path / "state.sqlite3")
    else:
        server = request.getfixturevalue("pg_server")
        db = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {db}")
        b = PostgresBackend(f"{server.replace('dbname=postgres', '')} dbname={db}")
    yield b
    b.close()


def _entry(owner: str, text: str) -> StoredResponse:
    return StoredResponse(owner=owner, response={"id": text, "output_text": text}, history=[])


# -- per-owner quotas ---------------------------------------------------------------------------------------
def test_a_noisy_key_evicts_its_own_responses_not_anothers(backend):
    """Key A stores one chain; key B then floods the store (`store: true`, 4x its size). A's chain survives: a full
    store evicts from the owner holding the most. (A global LRU evicted A's entries first.)"""
    now = [0.0]

    def clock() -> float:
        now[0] += 1
        return now[0]

    s = ResponseStore(max_entries=20, max_bytes=10**6, ttl_s=3600, clock=clock, backend=backend)
    for i in range(5):
        assert s.put(f"resp_a{i}", _entry("alice", f"a{i}"))
    for i in range(80):
        assert s.put(f"resp_b{i}", _entry("bob", f"b{i}"))
    assert all(s.get(f"resp_a{i}", "alice") is not None for i in range(5))
    assert len(s) == 20 and s.get("resp_b79", "bob") is not None and s.get("resp_b0", "bob") is None


def test_an_owner_quota_caps_one_key_below_the_store(backend):
    s = ResponseStore(max_entries=100, max_bytes=10**6, ttl_s=3600, backend=backend, max_entries_per_owner=3)
    for i in range(6):
        s.put(f"resp_{i}", _entry("bob", str(i)))
    s.put("resp_x", _entry("alice", "x"))
    assert [s.get(f"resp_{i}", "bob") is not None for i in range(6)] == [False] * 3 + [True] * 3
    assert s.get("resp_x", "alice") is not None and len(s) == 4


def test_the_byte_cap_evicts_the_heaviest_owner_first(backend):
    bounds = StoreBounds(max_entries=1000, max_bytes=5000, ttl_s=3600)
    backend.put_response("small", "alice", b"x" * 500, 1.0, bounds)
    for i in range(10):
        assert backend.put_response(f"big{i}", "bob", b"y" * 1000, 2.0 + i, bounds)
    assert backend.get_response("small", "alice", 20.0, 3600) is not None
    count, total = backend.response_stats(20.0)
    assert total <= 5000 and backend.get_response("big9", "bob", 20.0, 3600) is not None


# -- SQLite reads take no write lock -------------------------------------------------------------------------
def test_sqlite_reads_run_beside_a_writer_that_holds_the_lock(tmp_path):
    """Another process holds the write lock (a long batch of kept turns): reads still answer at once. (With
    BEGIN IMMEDIATE they waited the whole 10 s busy timeout, then failed with "database is locked".)"""
    path = tmp_path / "state.sqlite3"
    b = SQLiteBackend(path)
    bounds = StoreBounds(max_entries=10, max_bytes=10**6, ttl_s=3600)
    b.put_response("resp_1", "alice", b"body", 1.0, bounds)
    b.put_kept_turns([("k1", b"\x00" * 16)], 1.0, bounds)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the writer's lock, held
    try:
        started = time.monotonic()
        assert b.get_kept_turns(["k1"], 2.0) == {"k1": b"\x00" * 16}
        assert b.response_stats(2.0) == (1, 4) and b.kept_turn_stats(2.0)[0] == 1
        assert b.count_leases("alice", 2.0) == 0
        assert time.monotonic() - started < 2.0
    finally:
        other.execute("ROLLBACK")
        other.close()
        b.close()


# -- a database that fails -----------------------------------------------------------------------------------
class _Down:
    """A backend whose every call fails, as a database that went away does."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise psycopg.OperationalError("connection refused")

        return fail


def test_a_failed_kept_turn_read_falls_back_to_no_kept_turns():
    store = KeptTurnStore(_Down(), StoreBounds(max_entries=10, max_bytes=10**6, ttl_s=60))  # type: ignore[arg-type]
    assert store.get_many(["k1", "k2"]) == {} and store.read_failed == 1
    store._queue.put(None)  # stop the writer without closing the failing backend


def test_per_key_limits_fail_open_when_the_database_is_down(caplog):
    limiter = KeyLimiter(Limits(LimitsSpec(max_concurrent_per_key=1, requests_per_minute_per_key=1)), backend=_Down())
    with caplog.at_level("WARNING", logger="ray.serve"):
        assert limiter.acquire("alice") is None and limiter.acquire("alice") is None  # admitted, not a 500
    assert limiter.unavailable == 2 and "admitting without limits" in caplog.text


def test_an_unreachable_postgres_does_not_fail_start_up(caplog):
    """Stateless traffic needs no database: opening the backend returns (with a warning) and each call that needs
    state fails on its own, where its caller falls back."""
    dsn = f"host=127.0.0.1 port={free_port()} dbname=none user=none connect_timeout=1"
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="ray.serve"):
        b = PostgresBackend(dsn, connect_timeout_s=1.0)
    try:
        assert time.monotonic() - started < 10 and "unreachable" in caplog.text
        with pytest.raises(Exception):
            b.response_stats(0.0)
        limiter = KeyLimiter(Limits(LimitsSpec(max_concurrent_per_key=1)), backend=b)
        assert limiter.acquire("alice") is None
    finally:
        b.close()


def test_one_small_pool_per_process_and_dsn(pg_server):
    """Store, kept turns and limits of one replica share one pool of postgres_pool_size connections, closed with its
    last user (docs/OPERATIONS.md: the arithmetic against max_connections)."""
    spec = StateSpec(backend="postgres", postgres_dsn=pg_server, postgres_pool_size=3)
    a, b = open_backend(spec), open_backend(spec)
    try:
        assert a._backend is b._backend and a._backend._pool.max_size == 3
        a.close()
        assert a._backend._pool.closed is False and b.response_stats(0.0)[0] >= 0
    finally:
        b.close()
    assert b._backend._pool.closed


def test_the_ingress_stop_hands_queued_kept_turns_to_the_database(tokenizer, tmp_path):
    """A graceful stop of an ingress replica (its app's lifespan ending) closes the kept-turn writer, which writes
    what is still queued: turns finished just before a redeploy are kept (before, they were dropped with the
    process)."""
    from types import SimpleNamespace

    from fastapi.testclient import TestClient

    from agentserve.apis.models import Catalog
    from agentserve.config import ModelSpec, ServeArgs
    from agentserve.doctor import PrefixDoctor
    from agentserve.ingress.app import IngressParts, make_app
    from agentserve.ingress.context import IngressContext
    from agentserve.ingress.lifecycle import RequestPath
    from agentserve.ingress.observers.kept_turns import KeptTurnWriter

    path = tmp_path / "state.sqlite3"
    gate = threading.Event()

    class Slow(SQLiteBackend):
        def put_kept_turns(self, rows, now, bounds):
            gate.wait(5)
            return super().put_kept_turns(rows, now, bounds)

    kept = KeptTurnStore(Slow(path), StoreBounds(max_entries=100, max_bytes=10**7, ttl_s=3600))
    args = ServeArgs(secret_key=signing_key("unit"))
    engine = SimpleNamespace(options=lambda **_: engine)
    rpath = RequestPath(
        args, preprocessor=None, router=None, engines={ModelSpec().id: engine}, tokenizers={ModelSpec().id: tokenizer},
        doctor=PrefixDoctor.from_args(args, tokenizer), observers=[KeptTurnWriter(kept, 0.0)],
    )
    ctx = IngressContext(args=args, catalog=Catalog((ModelSpec(),)), path=rpath, preprocessor=None)  # type: ignore[arg-type]
    app = make_app(IngressParts(ctx=ctx, store=ResponseStore(max_entries=10, max_bytes=10**6, ttl_s=60)))
    with TestClient(app):
        for i in range(5):
            kept.put(f"k{i}", [1, 2], [3])
        threading.Timer(0.3, gate.set).start()  # the database answers only once the stop has begun
    reopened = SQLiteBackend(path)
    assert len(reopened.get_kept_turns([f"k{i}" for i in range(5)], time.time())) == 5
    reopened.close()
