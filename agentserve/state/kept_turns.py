"""Kept turns: the exact token ids a finished assistant turn was generated as, so a replay can reuse them.

One entry per turn, under its content key (preprocess/turn_digest.py): the digest of the prompt it followed, its
output token ids, and that prompt as a link: the key of the kept turn the prompt continues (`base`) and the prompt's
ids after that turn's output (`tail`). A session's prompts are so stored once, turn by turn, and a replica that
never saw the session rebuilds its latest prompt from one read (preprocess/incremental.py), linear in its length. They live in the state backend (SQLite file / PostgreSQL), bounded in entries, bytes and
lifetime like the Responses store, and shared by every replica, so a session survives restarts and redeploys.

Writes and recency refreshes go through one background thread per process that batches them into single
transactions: the ingress event loop only enqueues (and may await the batch's commit with a bound), the
preprocessor's reads stay one SELECT.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from array import array
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import orjson

from agentserve.protocol.token_ids import packed
from agentserve.state.backend import StateBackend, StoreBounds

if TYPE_CHECKING:
    from agentserve.config import KeptTurnsSpec, StateSpec

logger = logging.getLogger("ray.serve")

_DIGEST = 16  # bytes of a token digest


def token_digest(token_ids: Sequence[int]) -> bytes:
    """Digest of a token sequence; equal to feeding its pieces to `TokenHasher` in order."""
    h = TokenHasher()
    h.update(token_ids)
    return h.digest()


class TokenHasher:
    """Incremental token digest: a prompt built piece by piece hashes as the whole prompt."""

    def __init__(self) -> None:
        self._h = hashlib.blake2b(digest_size=_DIGEST, person=b"agentserve-toks")

    def update(self, token_ids: Sequence[int]) -> None:
        self._h.update(packed(token_ids))  # the array's own bytes: no copy when it already is one

    def copy(self) -> "TokenHasher":
        c = TokenHasher.__new__(TokenHasher)
        c._h = self._h.copy()
        return c

    def digest(self) -> bytes:
        return self._h.digest()


_FORMAT = b"KT2\x00"  # bodies with base and tail; older bodies (digest + output) still decode, without a link


@dataclass(frozen=True, slots=True)
class KeptTurn:
    """Ids are packed `array("I")`s, never mutated: a replica that rebuilds a 300-turn prompt decodes and joins
    every turn's, and as arrays that is a copy of bytes (as tuples of ints it was most of the rebuild)."""

    prompt_digest: bytes  # token_digest() of the prompt the turn was generated after
    output_ids: array  # exactly what the engine generated, end-of-turn token included
    base: str = ""  # the kept turn whose prompt + output the prompt continues ("": the prompt is all tail)
    tail: array | None = None  # the prompt's ids after base's output (None: not stored)

    def encode(self) -> bytes:
        if self.tail is None:
            return self.prompt_digest + packed(self.output_ids).tobytes()
        base = self.base.encode()
        head = _FORMAT + self.prompt_digest + len(base).to_bytes(1, "little") + base
        output = packed(self.output_ids)
        return head + len(output).to_bytes(4, "little") + output.tobytes() + packed(self.tail).tobytes()

    @classmethod
    def decode(cls, body: bytes) -> "KeptTurn":
        if body.startswith(_FORMAT):
            at = len(_FORMAT)
            digest, at = body[at : at + _DIGEST], at + _DIGEST
            n = body[at]
            base, at = body[at + 1 : at + 1 + n].decode(), at + 1 + n
            count, at = int.from_bytes(body[at : at + 4], "little"), at + 4
            split = at + 4 * count
            return cls(digest, _ids(body, at, split), base, _ids(body, split, len(body)))
        return cls(body[:_DIGEST], _ids(body, _DIGEST, len(body)))


@dataclass(frozen=True, slots=True)
class SessionHead:
    """A session's latest kept turn and the cache space its prompt was prefilled in: what a warm start prefills
    again (serve/warm_start.py). Holds no text and no caller identity: a key, a salt digest, an adapter id."""

    turn: str  # the kept turn's key
    cache_salt: str | None
    adapter: str | None
    tokens: int  # its prompt and output

    def encode(self) -> bytes:
        return orjson.dumps([self.turn, self.cache_salt, self.adapter, self.tokens])

    @classmethod
    def decode(cls, body: bytes) -> "SessionHead":
        turn, salt, adapter, tokens = orjson.loads(body)
        return cls(turn, salt, adapter, int(tokens))


def session_digest(session: str) -> str:
    """A head's row key: the session (`<caller>/<model>/<key>`) hashed, so the table names no caller."""
    return hashlib.blake2b(session.encode(), digest_size=16, person=b"agentserve-head").hexdigest()


def _ids(body: bytes, start: int, end: int) -> array:
    ids = array("I")
    ids.frombytes(memoryview(body)[start:end])
    return ids


@dataclass(frozen=True, slots=True)
class _Put:
    key: str
    prompt_ids: Sequence[int]  # hashed on the writer thread, not by the caller
    output_ids: Sequence[int]
    done: Future
    base: str = ""
    tail_from: int | None = None  # prompt_ids[tail_from:] is the tail after base (None: store no link)


@dataclass(frozen=True, slots=True)
class _Head:
    session: str
    model: str
    head: SessionHead


class KeptTurnStore:
    """Reads on the caller's thread; writes and touches batched on a daemon thread (bounded queue)."""

    def __init__(
        self,
        backend: StateBackend,
        bounds: StoreBounds,
        *,
        clock: Callable[[], float] = time.time,
        max_queue: int = 10_000,
        max_batch: int = 256,
        max_heads: int = 4096,
    ) -> None:
        self._backend = backend
        self._bounds = bounds
        self._max_heads = max_heads
        self._clock = clock
        self._queue: queue.Queue = queue.Queue(max_queue)
        self._max_batch = max_batch
        self._touched: OrderedDict[str, float] = OrderedDict()  # key -> when this process last refreshed it
        self._touch_lock = threading.Lock()
        self.dropped = 0  # puts refused because the queue was full (the database cannot keep up)
        self.failed = 0  # batches the database refused
        self.read_failed = 0  # reads the database refused (those prompts were re-rendered)
        self._thread = threading.Thread(target=self._run, name="kept-turns", daemon=True)
        self._thread.start()

    # -- reads (preprocessor) ----------------------------------------------------------------------------
    def get_many(self, keys: Sequence[str]) -> dict[str, KeptTurn]:
        """The kept turns of those keys there are; none when the database cannot answer: a kept turn only saves a
        re-render, so a failed read re-renders every turn (the prompt differs where the spelling did) and the
        request goes on."""
        if not keys:
            return {}
        try:
            rows = self._backend.get_kept_turns(list(dict.fromkeys(keys)), self._clock())
        except Exception:  # noqa: BLE001 - the database is down or locked: the turns are re-rendered
            self.read_failed += 1
            if self.read_failed & (self.read_failed - 1) == 0:  # the 1st, 2nd, 4th, 8th ... failure: no log flood
                logger.warning("kept turns: a read failed (%d so far); re-rendering", self.read_failed, exc_info=True)
            return {}
        return {k: KeptTurn.decode(b) for k, b in rows.items()}

    def touch(self, keys: Sequence[str]) -> None:
        """Refresh recency of turns a replay used, in the background (an active session's oldest turns stay).
        A key this process refreshed within the last twentieth of the lifetime is not written again: a session's
        every request replays all its turns, and recency that fine is not worth a write per turn per request."""
        now = self._clock()
        fresh = now - self._bounds.ttl_s / 20
        with self._touch_lock:
            due = [k for k in keys if self._touched.get(k, fresh - 1) < fresh]
            for k in due:
                self._touched[k] = now
                self._touched.move_to_end(k)
            while len(self._touched) > 100_000:
                self._touched.popitem(last=False)
        if due:
            try:
                self._queue.put_nowait(tuple(due))
            except queue.Full:
                self.dropped += 1

    # -- writes (ingress) --------------------------------------------------------------------------------
    def put(
        self,
        key: str,
        prompt_ids: Sequence[int],
        output_ids: Sequence[int],
        *,
        base: str = "",
        tail_from: int | None = None,
    ) -> Future:
        """Queue a turn (the lists are read later: do not mutate them); the future resolves once its batch is
        committed (True) or refused (False). `base` / `tail_from`: the prompt continues kept turn `base` from
        `prompt_ids[tail_from]` on (PromptReport.replay_base); None stores no link."""
        done: Future = Future()
        try:
            self._queue.put_nowait(_Put(key, prompt_ids, output_ids, done, base, tail_from))
        except queue.Full:
            self.dropped += 1
            done.set_result(False)
        return done

    def put_head(self, session: str, model: str, head: SessionHead) -> None:
        """Queue a session's latest turn (written after the turns of its batch, so it never names a turn the
        database lacks)."""
        try:
            self._queue.put_nowait(_Head(session_digest(session), model, head))
        except queue.Full:
            self.dropped += 1

    def heads(self, model: str, limit: int) -> list[SessionHead]:
        """The model's most recently active sessions' heads, the most recent first (blocking; [] when the database
        cannot answer: a warm start is an optimization)."""
        try:
            return [SessionHead.decode(b) for b in self._backend.session_heads(model, limit, self._clock())]
        except Exception:  # noqa: BLE001 - no warm start, the replica still serves
            logger.warning("kept turns: session heads could not be read", exc_info=True)
            return []

    def stats(self) -> tuple[int, int]:
        return self._backend.kept_turn_stats(self._clock())

    def close(self, timeout_s: float = 5.0) -> None:
        """Write out what is queued (a graceful stop keeps the turns it finished), then close the backend (the
        store owns it, as the Responses store does). Idempotent."""
        if not self._thread.is_alive():
            return
        self._queue.put(None)  # after everything queued: the writer flushes it all, then stops
        self._thread.join(timeout=timeout_s)
        if self._thread.is_alive():
            logger.warning("kept turns: the database did not take the queued turns within %.0fs", timeout_s)
        self._backend.close()

    # -- the writer thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < self._max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._flush(batch)
                    return
                batch.append(nxt)
            self._flush(batch)

    def _flush(self, batch: list) -> None:
        puts = [p for p in batch if isinstance(p, _Put)]
        heads = {h.session: h for h in batch if isinstance(h, _Head)}  # a session's last in the batch
        touched = [k for t in batch if isinstance(t, tuple) for k in t]
        now = self._clock()
        ok = True
        try:
            if touched:  # first: a put in the same batch may evict, and what was just used must stay
                self._backend.touch_kept_turns(list(dict.fromkeys(touched)), now, self._bounds.ttl_s)
            if puts:
                rows = [(p.key, _kept(p).encode()) for p in puts]
                self._backend.put_kept_turns(rows, now, self._bounds)
            if heads:
                self._backend.put_session_heads(
                    [(h.session, h.model, h.head.encode()) for h in heads.values()], now, self._max_heads,
                    self._bounds.ttl_s,
                )
        except Exception:  # noqa: BLE001 - the database is down: the turns are simply not kept
            ok = False
            self.failed += 1
            logger.warning("kept turns: a batch of %d writes failed", len(batch), exc_info=True)
        for p in puts:
            if not p.done.done():
                p.done.set_result(ok)


def _kept(p: _Put) -> KeptTurn:
    tail = None if p.tail_from is None else packed(p.prompt_ids[p.tail_from :])
    return KeptTurn(token_digest(p.prompt_ids), packed(p.output_ids), p.base if tail is not None else "", tail)


def open_kept_turns(spec: "KeptTurnsSpec", state: "StateSpec") -> KeptTurnStore | None:
    """The configured store, or None when token-exact replay is off. Blocking (opens the database)."""
    if not spec.enabled:
        return None
    from agentserve.state.open import open_backend

    bounds = StoreBounds(max_entries=spec.max_entries, max_bytes=spec.max_bytes, ttl_s=spec.ttl_s)
    return KeptTurnStore(open_backend(state), bounds, max_heads=spec.max_session_heads)
