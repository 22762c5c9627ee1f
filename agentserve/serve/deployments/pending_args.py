"""What a Ray Serve request router reads of a pending call: the one argument of a given type (a RouteDecision for
the Engine, a SessionAffinity for the Preprocessor, a RouterTarget for the Router), and the replica it pins to."""

from __future__ import annotations

from typing import Optional, TypeVar

from ray.serve.request_router import PendingRequest, RunningReplica

T = TypeVar("T")


def argument_of(pending: Optional[PendingRequest], kind: type[T]) -> T | None:
    if pending is None:
        return None
    for value in (*pending.args, *pending.kwargs.values()):
        if isinstance(value, kind):
            return value
    return None


def pinned(candidates: list[RunningReplica], replica_id: str) -> list[RunningReplica]:
    """The candidate with that Serve replica id ([] when it is gone)."""
    return [r for r in candidates if r.replica_id.unique_id == replica_id]


def back_off_between_rounds(pending: Optional[PendingRequest]) -> None:
    """Tell Serve this ranking is the last word: when none of its replicas can take the call, Serve sleeps
    (with growing backoff) before asking again. Serve's own routers set this once their locality tiers are spent;
    a router that ranks without them must set it, or a full or unreachable replica is asked again at once, in a
    loop of the caller's handle event loop."""
    if pending is not None:
        pending.routing_context.should_backoff = True
