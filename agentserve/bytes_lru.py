"""An LRU map bounded in bytes, safe to share between a replica's threads: every memo a replica keeps per session
(the prompts a Preprocessor made, the conversations an Ingress sent and a Preprocessor was sent) is one."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BytesLRU(Generic[K, V]):
    """key -> value, each with the bytes it holds as its putter counts them; the least recently used go first past
    `max_bytes`, and a value larger than the whole budget is not kept (nor is what it replaced)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    def put(self, key: K, value: V, nbytes: int) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if nbytes > self.max_bytes:
                return
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def pop(self, key: K) -> V | None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is None:
                return None
            self._bytes -= old[1]
            return old[0]
