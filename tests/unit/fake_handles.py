"""A deployment handle's method without Ray: `.remote(*args)` calls a function and records the call."""

from __future__ import annotations

from typing import Any, Callable


class Method:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls: list[tuple] = []

    def remote(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.fn(*args)
