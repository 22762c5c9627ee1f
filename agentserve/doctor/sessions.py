"""Each session's last turn, compactly (4 bytes per token), in an LRU bounded in bytes.

Why bytes and not a session count: one agent session at a 100K-token context is 400 KB here (and was
~3.6 MB as a Python list of ints), so a count bound says nothing about memory.

Sessions are held under a keyed digest of their key (a secret of this process): a session key is made of
things a caller can guess (its key's digest, a client session id, a hash of the first message), and the
memory's keys must not be worth anything to whoever reads them (a heap dump, a debugger, a log line).
"""

from __future__ import annotations

import hashlib
import secrets
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

# What one entry costs beyond its tokens: the dict node, the key, this object and the array header.
ENTRY_OVERHEAD_BYTES = 256


@dataclass(frozen=True, slots=True)
class LastTurn:
    """Turn N as the engine saw it. `tokens` is never mutated once stored, so a worker thread may read it."""

    tokens: array  # array('I'): prompt + output token ids
    prompt_len: int

    @property
    def nbytes(self) -> int:
        return self.tokens.itemsize * len(self.tokens)

    def extended_by(self, prompt: Sequence[int]) -> bool:
        """True when `prompt` starts with all of this turn: one C-level copy and compare, no Python loop."""
        n = len(self.tokens)
        return len(prompt) >= n and array("I", prompt[:n]) == self.tokens


class SessionMemory:
    """LRU of session key -> LastTurn, holding at most `max_bytes` (tokens plus a fixed per-entry cost).

    Not thread-safe: one thread (the ingress event loop) gets and puts; LastTurn values may be handed on.
    """

    def __init__(self, max_bytes: int, secret: bytes | None = None) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self._turns: OrderedDict[str, LastTurn] = OrderedDict()

    def __len__(self) -> int:
        return len(self._turns)

    def _key(self, key: str) -> str:
        return hashlib.blake2b(key.encode(), key=self._secret, digest_size=16).hexdigest()

    def get(self, key: str) -> LastTurn | None:
        key = self._key(key)
        turn = self._turns.get(key)
        if turn is not None:
            self._turns.move_to_end(key)
        return turn

    def put(self, key: str, prompt: Sequence[int], output: Sequence[int]) -> None:
        """Remember a finished turn; a turn larger than the whole budget is not kept (nor its predecessor)."""
        key = self._key(key)
        self._drop(key)
        tokens = array("I", prompt)
        tokens.extend(output)
        turn = LastTurn(tokens, len(prompt))
        cost = self._cost(key, turn)
        if cost > self.max_bytes:
            return
        self._turns[key] = turn
        self.nbytes += cost
        while self.nbytes > self.max_bytes:
            old_key, old = self._turns.popitem(last=False)
            self.nbytes -= self._cost(old_key, old)

    def forget(self, key: str) -> None:
        self._drop(self._key(key))

    def _drop(self, key: str) -> None:
        old = self._turns.pop(key, None)
        if old is not None:
            self.nbytes -= self._cost(key, old)

    @staticmethod
    def _cost(key: str, turn: LastTurn) -> int:
        return turn.nbytes + len(key) + ENTRY_OVERHEAD_BYTES
