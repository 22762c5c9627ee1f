"""Kept turns in the state backend: batched writes, bounded in entries and bytes, expiring, shared by processes."""

from __future__ import annotations

from array import array

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.state.backend import StoreBounds
from agentserve.state.kept_turns import KeptTurn, KeptTurnStore, TokenHasher, token_digest
from agentserve.state.sqlite import SQLiteBackend


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(path=":memory:", entries=100, nbytes=1 << 20, ttl=60.0, clock=None) -> KeptTurnStore:
    return KeptTurnStore(SQLiteBackend(path), StoreBounds(entries, nbytes, ttl), clock=clock or Clock())


@given(st.lists(st.lists(st.integers(0, 2**32 - 1), max_size=50), max_size=6))
@settings(max_examples=50, deadline=None)
def test_a_prompt_hashed_piece_by_piece_hashes_as_the_whole(pieces):
    h = TokenHasher()
    for p in pieces:
        h.update(p)
    assert h.digest() == token_digest([t for p in pieces for t in p])


def test_put_then_get_returns_the_exact_tokens_and_prompt_digest():
    store = make()
    assert store.put("k1", [1, 2, 3], [7, 8, 2]).result(timeout=5)
    got = store.get_many(["k1", "missing"])
    assert got == {"k1": KeptTurn(token_digest([1, 2, 3]), array("I", [7, 8, 2]))}
    store.close()


def test_least_recently_used_go_first_past_the_entry_bound_and_touch_keeps_a_turn():
    """Past a bound the store evicts down to 90% of it, least recently used first."""
    clock = Clock()
    store = make(entries=10, clock=clock)
    for i in range(10):
        assert store.put(f"k{i}", [i], [i, 2]).result(timeout=5)
    store.touch(["k0"])  # an active session's oldest turn
    assert store.put("k10", [10], [10, 2]).result(timeout=5)  # the touch was queued first: it is applied first
    keys = [f"k{i}" for i in range(11)]
    assert set(store.get_many(keys)) == set(keys) - {"k1", "k2"}
    store.close()


def test_byte_bound_and_expiry():
    clock = Clock()
    store = make(nbytes=200, ttl=10.0, clock=clock)
    assert store.put("big", [1], list(range(100))).result(timeout=5)  # 16 + 400 bytes > 200: not kept
    assert store.get_many(["big"]) == {}
    assert store.put("small", [1], [1, 2]).result(timeout=5)
    clock.now += 11
    assert store.get_many(["small"]) == {}
    store.close()


def test_concurrent_writers_are_batched_and_all_committed(tmp_path):
    store = make(str(tmp_path / "state.sqlite3"), entries=10_000)
    futures = []

    def writer(n: int) -> None:
        for i in range(50):
            futures.append(store.put(f"{n}-{i}", [n, i], [i, 2]))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(f.result(timeout=10) for f in futures)
    other = make(str(tmp_path / "state.sqlite3"))  # another process's view of the same file
    assert len(other.get_many([f"{n}-{i}" for n in range(4) for i in range(50)])) == 200
    store.close()
    other.close()


def test_a_turn_used_by_every_request_is_refreshed_once_per_twentieth_of_its_lifetime():
    clock = Clock()
    writes: list[tuple] = []
    store = make(ttl=100.0, clock=clock)
    real = store._backend.touch_kept_turns
    store._backend.touch_kept_turns = lambda keys, now, ttl: (writes.append(tuple(keys)), real(keys, now, ttl))
    assert store.put("k", [1], [1, 2]).result(timeout=5)
    for _ in range(10):  # ten requests within 5 s: one refresh
        store.touch(["k"])
        clock.now += 0.4
    assert store.put("flush", [1], [1, 2]).result(timeout=5)  # the writer has taken the touches before it
    clock.now += 2
    store.touch(["k"])  # 6 s later: refreshed again
    assert store.put("flush", [1], [1, 2]).result(timeout=5)  # queued after the touches: they are written
    assert writes == [("k",), ("k",)]
    store.close()
