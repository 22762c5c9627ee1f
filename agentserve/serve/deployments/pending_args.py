"""What a Ray Serve request router reads of a pending call: the one argument of a given type (a RouteDecision for
the Engine, a SessionAffinity for the Preprocessor), wherever the caller passed it."""

from __future__ import annotations

from typing import Optional, TypeVar

from ray.serve.request_router import PendingRequest

T = TypeVar("T")


def argument_of(pending: Optional[PendingRequest], kind: type[T]) -> T | None:
    if pending is None:
        return None
    for value in (*pending.args, *pending.kwargs.values()):
        if isinstance(value, kind):
            return value
    return None
