"""A deployment handle's method without Ray: `.remote(*args, **kwargs)` calls a function and records the call."""

from __future__ import annotations

from typing import Any, Callable


class Method:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls: list[tuple] = []
        self.kwargs: list[dict[str, Any]] = []

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(args)
        self.kwargs.append(kwargs)
        return self.fn(*args, **kwargs)
