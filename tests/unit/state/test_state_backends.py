"""Both state backends (SQLite file, real PostgreSQL server) against the same tests: the Responses store's
bounds and owner scoping, thread safety, survival across re-opening, and per-key limits shared by two ingresses."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import psycopg
from hypothesis import given, settings, strategies as st
import pytest

from agentserve.apis.responses.store import ResponseStore, StoredResponse
from agentserve.config import LimitsSpec
from agentserve.protocol.errors import RequestError
from agentserve.ingress.middleware.limits import Limits, KeyLimiter
from agentserve.state import StateBackend, StoreBounds
from agentserve.state.postgres import PostgresBackend
from agentserve.state.sqlite import SQLiteBackend
from agentserve.deploy.local_postgres import postgres_server

Opener = Callable[[], StateBackend]


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request, tmp_path) -> Iterator[Opener]:
    """A function that opens (again) one fresh database of the backend under test."""
    opened: list[StateBackend] = []
    if request.param == "sqlite":
        path = tmp_path / "state.sqlite3"

        def open_() -> StateBackend:
            opened.append(SQLiteBackend(path))
            return opened[-1]
    else:
        server = request.getfixturevalue("pg_server")
        db = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {db}")

        def open_() -> StateBackend:
            opened.append(PostgresBackend(f"{server.replace('dbname=postgres', '')} dbname={db}"))
            return opened[-1]

    yield open_
    for b in opened:
        b.close()


def entry(owner: str, text: str = "hi") -> StoredResponse:
    return StoredResponse(owner=owner, response={"id": "r", "output_text": text}, history=[{"role": "user", "content": text}])


def store(backend: StateBackend, clock: Callable[[], float], **bounds) -> ResponseStore:
    caps = {"max_entries": 100, "max_bytes": 1_000_000, "ttl_s": 60.0, **bounds}
    return ResponseStore(**caps, clock=clock, backend=backend)


# -- Responses store ------------------------------------------------------------------------------------------
def test_put_get_delete_and_owner_scoping(opener):
    s = store(opener(), clock=lambda: 1000.0)
    assert s.put("resp_1", entry("alice", "one"))
    got = s.get("resp_1", "alice")
    assert got == entry("alice", "one")
    assert s.get("resp_1", "mallory") is None  # another key: as if it did not exist
    assert not s.delete("resp_1", "mallory") and s.get("resp_1", "alice") is not None
    assert s.delete("resp_1", "alice") and s.get("resp_1", "alice") is None
    assert not s.delete("resp_1", "alice")
    assert s.get("missing", "alice") is None


def test_ttl_expires_unused_entries_and_reading_refreshes_it(opener):
    now = [0.0]
    s = store(opener(), clock=lambda: now[0], ttl_s=10.0)
    s.put("a", entry("o"))
    s.put("b", entry("o"))
    now[0] = 8.0
    assert s.get("a", "o") is not None  # a used at 8: lives until 18
    now[0] = 12.0
    assert s.get("b", "o") is None  # b expired at 10
    assert s.get("a", "o") is not None and len(s) == 1
    now[0] = 30.0
    assert s.get("a", "o") is None and len(s) == 0 and s.bytes == 0
    assert not s.delete("a", "o")


def test_entry_cap_evicts_the_least_recently_used(opener):
    s = store(opener(), clock=lambda: 5.0, max_entries=3)  # one clock reading for all: recency is logical
    for rid in ("a", "b", "c"):
        s.put(rid, entry("o"))
    assert s.get("a", "o") is not None  # a is now the most recently used
    s.put("d", entry("o"))
    assert s.get("b", "o") is None  # b was the least recently used
    assert all(s.get(r, "o") is not None for r in ("a", "c", "d")) and len(s) == 3


def test_byte_cap_evicts_until_it_fits_and_refuses_one_larger_than_the_store(opener):
    size = len(b'{"response":{"id":"r","output_text":"' + b"x" * 1000 + b'"},"history":[{"role":"user","content":"' + b"x" * 1000 + b'"}]}')
    s = store(opener(), clock=lambda: 5.0, max_bytes=size * 3 + size // 2)
    for rid in ("a", "b", "c"):
        assert s.put(rid, entry("o", "x" * 1000))
    assert len(s) == 3 and s.bytes == 3 * size
    s.put("d", entry("o", "x" * 1000))
    assert len(s) == 3 and s.bytes <= size * 3 + size // 2 and s.get("a", "o") is None
    assert not s.put("huge", entry("o", "y" * 10 * size))  # alone larger than the whole store: not stored
    assert s.get("huge", "o") is None and len(s) == 3


def test_replacing_an_entry_counts_its_bytes_once(opener):
    s = store(opener(), clock=lambda: 5.0)
    s.put("a", entry("o", "short"))
    s.put("a", entry("o", "a much longer text than before"))
    assert len(s) == 1 and s.get("a", "o").response["output_text"] == "a much longer text than before"


def test_concurrent_threads_share_one_backend(opener):
    s = store(opener(), clock=lambda: 5.0, max_entries=150)

    def work(t: int) -> list[str]:
        ids = [f"t{t}_{i}" for i in range(25)]
        for rid in ids:
            assert s.put(rid, entry(f"owner{t}", rid))
            assert s.get(rid, f"owner{t}").response["output_text"] == rid
        return ids

    with ThreadPoolExecutor(8) as pool:
        ids = [i for batch in pool.map(work, range(8)) for i in batch]
    assert len(s) == 150  # 200 written, capped at 150
    alive = [rid for rid in ids if s.get(rid, f"owner{rid[1:].split('_')[0]}") is not None]
    assert len(alive) == 150


def test_entries_survive_reopening_the_backend(opener):
    first = opener()
    s = store(first, clock=lambda: 5.0)
    s.put("resp_keep", entry("alice", "kept"))
    first.close()
    again = store(opener(), clock=lambda: 6.0)  # a new process: schema creation is idempotent
    assert again.get("resp_keep", "alice").response["output_text"] == "kept"
    assert again.get("resp_keep", "bob") is None


def test_backend_takes_bounds_per_call():
    b = SQLiteBackend(":memory:")
    assert b.put_response("a", "o", b"12345", 0.0, StoreBounds(10, 5, 1.0))
    assert not b.put_response("b", "o", b"123456", 0.0, StoreBounds(10, 5, 1.0))
    assert b.response_stats(0.5) == (1, 5) and b.response_stats(2.0) == (0, 0)


# -- per-key limits shared by two ingress replicas --------------------------------------------------------------
def ingress(backend: StateBackend, spec: LimitsSpec, clock: Callable[[], float]) -> KeyLimiter:
    """One ingress replica's limiter; several of them over one backend are several replicas."""
    return KeyLimiter(Limits(spec), clock=clock, backend=backend)


def test_concurrency_leases_are_global_across_ingress_replicas(opener):
    backend, now = opener(), [100.0]
    spec = LimitsSpec(max_concurrent_per_key=2)
    a, b = ingress(backend, spec, lambda: now[0]), ingress(backend, spec, lambda: now[0])
    h1, h2 = a.acquire("key1"), b.acquire("key1")
    with pytest.raises(RequestError) as exc:
        a.acquire("key1")  # per replica it would be 1 of 2; globally it is the third
    assert exc.value.kind == "rate_limit" and exc.value.code == "concurrency_limit_exceeded"
    assert "already has 2 requests in flight" in exc.value.message and exc.value.retry_after == 1.0
    assert b.acquire("key2") is not None  # another key has its own slots
    assert a.in_flight("key1") == b.in_flight("key1") == 2
    b.release(h2)
    h3 = a.acquire("key1")
    assert a.in_flight("key1") == 2
    for h in (h1, h3):
        a.release(h)
    assert b.in_flight("key1") == 0


def test_a_dead_ingress_leases_expire_and_a_live_one_renews(opener):
    backend, now = opener(), [100.0]
    spec = LimitsSpec(max_concurrent_per_key=1, lease_ttl_s=30)
    dead, live = ingress(backend, spec, lambda: now[0]), ingress(backend, spec, lambda: now[0])
    dead.acquire("k")  # its process dies: never released, never renewed
    with pytest.raises(RequestError):
        live.acquire("k")
    now[0] += 31
    held = live.acquire("k")  # the dead holder's slot expired
    live.track(held)  # no event loop here: renewed by the renew() calls below
    for _ in range(4):  # renewed every 20 s: outlives its TTL many times over
        now[0] += 20
        live.renew()
        with pytest.raises(RequestError):
            dead.acquire("k")
    live.release(held)
    assert dead.acquire("k") is not None


def test_leases_are_atomic_under_concurrent_acquires(opener):
    backend = opener()
    spec = LimitsSpec(max_concurrent_per_key=5)
    limiters = [ingress(backend, spec, lambda: 100.0) for _ in range(4)]
    start = threading.Barrier(16)

    def try_once(i: int) -> bool:
        start.wait()
        try:
            limiters[i % 4].acquire("k")
            return True
        except RequestError:
            return False

    with ThreadPoolExecutor(16) as pool:
        granted = sum(pool.map(try_once, range(16)))
    assert granted == 5 and limiters[0].in_flight("k") == 5


def test_token_bucket_is_shared_and_refills(opener):
    backend, now = opener(), [0.0]
    spec = LimitsSpec(requests_per_minute_per_key=60, burst_per_key=3)
    a, b = ingress(backend, spec, lambda: now[0]), ingress(backend, spec, lambda: now[0])
    assert a.acquire("k") and b.acquire("k") and a.acquire("k")  # the burst, taken through two replicas
    with pytest.raises(RequestError) as exc:
        b.acquire("k")
    assert exc.value.code == "rate_limit_exceeded" and exc.value.retry_after == pytest.approx(1.0)
    now[0] = 0.5
    with pytest.raises(RequestError) as exc:
        a.acquire("k")
    assert exc.value.retry_after == pytest.approx(0.5)
    now[0] = 1.0
    assert b.acquire("k")  # one token back after a second at 1/s
    assert a.acquire("other")  # other keys have their own bucket
    now[0] = 100.0
    assert all(a.acquire("k") for _ in range(3))  # refilled to the burst, not beyond
    with pytest.raises(RequestError):
        a.acquire("k")


def test_a_rate_refusal_does_not_hold_a_concurrency_slot(opener):
    backend = opener()
    spec = LimitsSpec(max_concurrent_per_key=5, requests_per_minute_per_key=1, burst_per_key=1)
    a = ingress(backend, spec, lambda: 0.0)
    held = a.acquire("k")
    with pytest.raises(RequestError) as exc:
        a.acquire("k")
    assert exc.value.code == "rate_limit_exceeded" and a.in_flight("k") == 1
    a.release(held)
    assert a.in_flight("k") == 0


def test_prune_drops_expired_leases_and_full_buckets(opener):
    backend = opener()
    backend.acquire_lease("k", "l1", 5, now=0.0, ttl_s=10.0)
    backend.take_token("k", now=0.0, rate_per_s=1.0, burst=2.0)
    backend.prune(now=5.0, buckets_idle_s=10.0)
    assert backend.count_leases("k", 5.0) == 1
    backend.prune(now=20.0, buckets_idle_s=10.0)
    assert backend.count_leases("k", 20.0) == 0
    # A pruned bucket starts full again, the same as one that refilled.
    assert backend.take_token("k", 20.0, 1.0, 2.0).granted and backend.take_token("k", 20.0, 1.0, 2.0).granted


def test_kept_turns_survive_a_reopen_and_keep_the_most_recently_used(opener):
    """Token-exact replay's kept turns (state/kept_turns.py): batched put, LRU past the bounds, touch, reopen."""
    from agentserve.state.kept_turns import KeptTurnStore

    bounds = StoreBounds(max_entries=10, max_bytes=1 << 20, ttl_s=60.0)
    store = KeptTurnStore(opener(), bounds)
    for i in range(10):
        assert store.put(f"k{i}", [i], [i, 9]).result(timeout=10)
    store.touch(["k0"])
    assert store.put("k10", [10], [10, 9]).result(timeout=10)  # past the bound: down to 9, oldest first
    store.close()
    again = KeptTurnStore(opener(), bounds)
    keys = [f"k{i}" for i in range(11)]
    got = again.get_many(keys)
    assert set(got) == set(keys) - {"k1", "k2"} and list(got["k10"].output_ids) == [10, 9]
    assert again.stats()[0] == 9
    again.close()


# -- store totals: the bounds are checked against a running count, which must stay the table's --------------
def _scan(backend: StateBackend) -> dict[str, tuple[int, int]]:
    from agentserve.state.sql import KEPT, RESPONSES, TOTALS

    with backend._read() as tx:  # type: ignore[attr-defined]
        kept = {row[0]: (int(row[1]), int(row[2])) for row in tx.execute(f"SELECT store, entries, bytes FROM {TOTALS}").fetchall()}
        scanned = {s: tuple(int(v) for v in tx.execute(f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM {s}").fetchone())
                   for s in (RESPONSES, KEPT)}
    return {"totals": kept, "scanned": scanned}


_op = st.one_of(
    st.tuples(st.just("response"), st.integers(0, 5), st.sampled_from(["a", "b"]), st.integers(1, 300)),
    st.tuples(st.just("delete"), st.integers(0, 5), st.sampled_from(["a", "b"])),
    st.tuples(st.just("kept"), st.lists(st.tuples(st.integers(0, 7), st.integers(1, 300)), min_size=1, max_size=4)),
    st.tuples(st.just("later"), st.floats(0.0, 40.0)),
    st.tuples(st.just("prune")),
)


def test_store_totals_follow_every_write_and_the_bounds_hold(opener):
    """Any sequence of stores, replacements, deletes, expiries, evictions and prunes: each store's running totals
    equal a scan of its table, and neither store ends past its entry or byte bounds."""
    from agentserve.state.sql import KEPT, RESPONSES, TOTALS

    backend = opener()
    postgres = isinstance(backend, PostgresBackend)
    bounds = StoreBounds(max_entries=4, max_bytes=700, ttl_s=30.0, max_entries_per_owner=3, max_bytes_per_owner=500)
    kept_bounds = StoreBounds(max_entries=5, max_bytes=800, ttl_s=30.0)

    @settings(max_examples=25 if postgres else 60, deadline=None)
    @given(st.lists(_op, max_size=25))
    def run(ops):
        with backend._tx() as tx:  # type: ignore[attr-defined]
            for table in (RESPONSES, KEPT):
                tx.execute(f"DELETE FROM {table}")
            tx.execute(f"UPDATE {TOTALS} SET entries = 0, bytes = 0")
        now = 1000.0
        for op in ops:
            if op[0] == "response":
                backend.put_response(f"r{op[1]}", op[2], b"x" * op[3], now, bounds)
            elif op[0] == "delete":
                backend.delete_response(f"r{op[1]}", op[2], now)
            elif op[0] == "kept":
                backend.put_kept_turns([(f"k{k}", b"y" * n) for k, n in op[1]], now, kept_bounds)
            elif op[0] == "later":
                now += op[1]
            else:
                backend.prune(now, buckets_idle_s=1.0)
            seen = _scan(backend)
            assert seen["totals"] == seen["scanned"]
            assert seen["scanned"][RESPONSES][0] <= bounds.max_entries
            assert seen["scanned"][RESPONSES][1] <= bounds.max_bytes
            # kept turns evict to 90% once past a bound: never past it after a write
            assert seen["scanned"][KEPT][0] <= kept_bounds.max_entries
            assert seen["scanned"][KEPT][1] <= kept_bounds.max_bytes

    run()


def test_a_database_from_before_the_totals_gets_them_from_its_rows(opener):
    """A database an earlier version wrote (no totals table): opening it counts what it holds, so its bounds
    still hold."""
    from agentserve.state.sql import KEPT, TOTALS

    backend = opener()
    bounds = StoreBounds(max_entries=3, max_bytes=1 << 20, ttl_s=60.0)
    backend.put_kept_turns([(f"k{i}", b"z" * 10) for i in range(3)], 1000.0, bounds)
    with backend._tx() as tx:  # type: ignore[attr-defined]
        tx.execute(f"DROP TABLE {TOTALS}")
    backend.close()
    again = opener()
    assert _scan(again)["totals"][KEPT] == (3, 30)
    again.put_kept_turns([("k3", b"z" * 10)], 1001.0, bounds)  # past the entry bound: evicts down to 90%
    assert _scan(again)["scanned"][KEPT][0] <= 3


def test_drifted_totals_are_recounted_from_the_rows_and_the_bounds_hold_again(opener):
    """Rows a writer did not account for (a replica of an earlier version during an upgrade, a hand edit) leave the
    totals off; the recount sets them from the rows, says by how much, and the next write evicts to the bounds."""
    from agentserve.state.sql import KEPT, RESPONSES, TOTALS

    backend = opener()
    bounds = StoreBounds(max_entries=3, max_bytes=1 << 20, ttl_s=60.0)
    backend.put_response("r1", "a", b"x" * 40, 1000.0, StoreBounds(max_entries=10, max_bytes=1 << 20, ttl_s=60.0))
    backend.put_kept_turns([("k0", b"z" * 10)], 1000.0, bounds)
    with backend._tx() as tx:  # type: ignore[attr-defined]
        for i in range(1, 5):  # four kept turns written without their totals: past the entry bound unnoticed
            tx.execute(f"INSERT INTO {KEPT} (key, body, size, used, expires_at) VALUES (?, ?, ?, ?, ?)",
                       (f"k{i}", b"z" * 10, 10, i, 2000.0))  # fmt: skip
        tx.execute(f"UPDATE {TOTALS} SET entries = entries + 2, bytes = bytes - 5 WHERE store = ?", (RESPONSES,))
    assert _scan(backend)["totals"] != _scan(backend)["scanned"]

    assert backend.recount_totals() == {RESPONSES: (2, -5), KEPT: (-4, -40)}
    seen = _scan(backend)
    assert seen["totals"] == seen["scanned"] == {RESPONSES: (1, 40), KEPT: (5, 50)}
    assert backend.recount_totals() == {}  # nothing left to correct
    backend.put_kept_turns([("k5", b"z" * 10)], 1001.0, bounds)
    assert _scan(backend)["scanned"][KEPT][0] <= bounds.max_entries


def test_the_recount_runs_in_the_background_and_survives_a_failing_database(tmp_path):
    """No request waits on it: the upkeep thread re-counts on its own, a failed recount is retried next interval,
    and closing it closes its backend handle."""
    import time

    from agentserve.state.sql import KEPT, TOTALS
    from agentserve.state.upkeep import TotalsRecount

    backend = SQLiteBackend(tmp_path / "state.sqlite3")
    backend.put_kept_turns([("k0", b"z" * 10)], 1000.0, StoreBounds(max_entries=10, max_bytes=1 << 20, ttl_s=60.0))
    with backend._tx() as tx:
        tx.execute(f"UPDATE {TOTALS} SET entries = 99 WHERE store = ?", (KEPT,))
    calls = {"n": 0}
    recount = backend.recount_totals

    def flaky() -> dict[str, tuple[int, int]]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("database is locked")
        return recount()

    backend.recount_totals = flaky  # type: ignore[method-assign]
    upkeep = TotalsRecount(backend, interval_s=0.02, first_after_s=0.0)
    deadline = time.monotonic() + 5
    while upkeep.runs < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    upkeep.close()
    assert upkeep.failed == 1 and upkeep.runs >= 1
    reopened = SQLiteBackend(tmp_path / "state.sqlite3")
    assert _scan(reopened)["totals"][KEPT] == (1, 10)
    reopened.close()
    with pytest.raises(Exception):
        backend.kept_turn_stats(1000.0)  # the upkeep's handle is closed with it
