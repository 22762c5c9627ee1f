"""Service counters that decay with a half-life, bounded in number (the least recently charged go first).

Attained service is counted over a sliding horizon so that a session's (or key's) old turns stop counting
against it: exponential decay with half-life `half_life_s` (a value charged h seconds ago weighs 2^(-h/half_life)).
"""

from __future__ import annotations

from collections import OrderedDict


class DecayingCounters:
    def __init__(self, *, half_life_s: float, max_keys: int) -> None:
        self._half_life = half_life_s
        self._max = max_keys
        self._values: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (value, at)

    def __len__(self) -> int:
        return len(self._values)

    def add(self, key: str, amount: float, now: float) -> None:
        self._values[key] = (self.get(key, now) + amount, now)
        self._values.move_to_end(key)
        if len(self._values) > self._max:
            self._values.popitem(last=False)

    def get(self, key: str, now: float) -> float:
        entry = self._values.get(key)
        if entry is None:
            return 0.0
        value, at = entry
        return value * 2.0 ** (-max(0.0, now - at) / self._half_life)
