"""One way to wait for a condition while components start, restart or drain."""

from __future__ import annotations

import time
from typing import Callable


def wait_for(pred: Callable[[], bool], timeout: float = 30.0, every: float = 0.1, *, what: str = "condition") -> None:
    """Return once pred() is true; AssertionError after `timeout` seconds. An exception from pred (a component
    restarting) counts as not yet; the last one is chained to the timeout's error."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            if pred():
                return
            last = None
        except Exception as exc:  # noqa: BLE001 - a component restarting
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout}s") from last
        time.sleep(every)
