"""Admission: when every replica is saturated, wait in priority order, bounded in length and time.

The key follows Dynamo's fcfs policy: `arrival - priority_jump`, so a priority (or
latency_sensitivity) of p seconds lets a request overtake those that arrived up to p seconds
earlier. A request never waits forever: a full queue or a wait past `max_wait_s` is rejected with a
retry hint, which the APIs render as 503/529 with `Retry-After`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar

from agentserve.protocol.errors import RequestError

T = TypeVar("T")


@dataclass(order=True)
class _Waiter:
    key: float
    seq: int
    future: asyncio.Future = field(compare=False)
    item: Any = field(compare=False)


class AdmissionQueue(Generic[T]):
    def __init__(self, *, max_waiting: int, max_wait_s: float, retry_after_s: float, clock: Callable[[], float]) -> None:
        self._heap: list[_Waiter] = []
        self._seq = itertools.count()
        self._max_waiting = max_waiting
        self._max_wait = max_wait_s
        self._retry_after = retry_after_s
        self._clock = clock
        self.rejected = 0

    def __len__(self) -> int:
        return sum(1 for w in self._heap if not w.future.done())

    def overloaded(self, why: str) -> RequestError:
        self.rejected += 1
        return RequestError(
            "overloaded",
            f"all engine replicas are saturated ({why}); retry after {self._retry_after:g}s",
            code="overloaded",
            retry_after=self._retry_after,
        )

    async def wait(self, item: Any, priority_jump: float) -> T:
        """Wait until `pump` hands this item a result; raises RequestError('overloaded') instead of hanging."""
        if len(self) >= self._max_waiting:
            raise self.overloaded(f"{self._max_waiting} requests already waiting")
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, _Waiter(self._clock() - priority_jump, next(self._seq), fut, item))
        try:
            return await asyncio.wait_for(fut, self._max_wait)
        except asyncio.TimeoutError:
            raise self.overloaded(f"waited {self._max_wait:g}s for capacity") from None

    def pump(self, try_admit: Callable[[Any], T | None]) -> int:
        """Admit waiters in key order while `try_admit` finds room; returns how many were admitted."""
        admitted = 0
        while self._heap:
            head = self._heap[0]
            if head.future.done():
                heapq.heappop(self._heap)
                continue
            result = try_admit(head.item)
            if result is None:
                break
            heapq.heappop(self._heap)
            head.future.set_result(result)
            admitted += 1
        return admitted
