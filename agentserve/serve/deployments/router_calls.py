"""How calls reach the Router deployment when it has several replicas (no single Router).

Every Router replica holds the whole picture: each engine replica registers with, heartbeats to and reports to every
Router replica (`RouterCalls.each`), so each subscribes to every engine's KV events and has the complete prefix
index, and sees every request each engine runs (routing/load.py counts the other Routers' leases from that). A
session's route calls go to one Router replica, chosen by rendezvous hashing of its key (the Preprocessor's scheme,
serve/deployments/session_affinity.py: every Ingress replica agrees without sharing state), so one Router places a
session's turns while it lives, and when it dies the next in rank takes the session over with the same index. A
lease's release goes to the Router replica that leased it (`RouteDecision.router_id`); run-time LoRA adapter
bookkeeping goes to the first replica in id order (`RouterCalls.primary`), which the others relearn it from through
the engines' registrations if it dies.

`RouterCallRouter` is the Router deployment's Ray Serve request router. It runs inside each caller's handle, and it
is also how a caller learns the Router replicas: Serve hands it every change of the replica set, and it records the
set for `RouterCalls` in the same process (`members`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import Any, List, Optional

from ray.serve.handle import DeploymentHandle
from ray.serve.request_router import PendingRequest, RunningReplica

from agentserve.protocol.cluster import RouterTarget
from agentserve.serve.deployments.pending_args import argument_of, back_off_between_rounds, pinned
from agentserve.serve.handles import separate_call
from agentserve.serve.deployments.session_affinity import SessionAffinityRouter

logger = logging.getLogger("ray.serve")

# The Router replicas each process's handles last heard of, by (application, deployment): written by the handle's
# request router as Serve updates it, read by RouterCalls in the same process. Process-local by nature: it mirrors
# state Serve keeps per handle in this process.
_MEMBERS: dict[tuple[str, str], tuple[str, ...]] = {}
CALL_TIMEOUT_S = 5.0  # a Router replica silent this long is dead or restarting: the next round tries again


class RouterCallRouter(SessionAffinityRouter):
    def update_replicas(self, replicas: List[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self._publish()

    def on_replica_actor_died(self, replica_id: Any) -> None:
        super().on_replica_actor_died(replica_id)
        self._publish()

    def _publish(self) -> None:
        # Through the imported module, not this function's globals: Serve ships this class to the caller's process
        # pickled, maybe by value, and a by-value copy's globals are a dict of its own that RouterCalls never reads.
        registry = importlib.import_module("agentserve.serve.deployments.router_calls")._MEMBERS
        key = (self._deployment_id.app_name, self._deployment_id.name)
        registry[key] = tuple(sorted(r.replica_id.unique_id for r in self._replicas.values()))

    async def choose_replicas(
        self,
        candidate_replicas: List[RunningReplica],
        pending_request: Optional[PendingRequest] = None,
    ) -> List[List[RunningReplica]]:
        target = argument_of(pending_request, RouterTarget)
        if target is not None:
            back_off_between_rounds(pending_request)
            chosen = pinned(candidate_replicas, target.replica_id)
            # Gone: any replica takes it (a release or signal for ids it never leased is a no-op there).
            return [chosen] if chosen else [candidate_replicas]
        return await super().choose_replicas(candidate_replicas, pending_request)  # a session's: its home Router


def members(handle: DeploymentHandle) -> tuple[str, ...]:
    """The Router replicas this process's handles know of (empty before the first call initialises them)."""
    key = (getattr(handle, "app_name", None), getattr(handle, "deployment_name", None))  # a test's fake: none
    return _MEMBERS.get(key, ())  # type: ignore[arg-type]


class RouterCalls:
    """A caller's calls to the Router deployment: to every replica, to one, or to the primary."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self.handle = handle

    def members(self) -> tuple[str, ...]:
        return members(self.handle)

    def primary(self) -> RouterTarget | None:
        """Where the run-time adapter bookkeeping lives: the first replica in id order (None: not known yet)."""
        known = self.members()
        return RouterTarget(known[0]) if known else None

    async def each(self, method: str, *args: Any, timeout_s: float | None = CALL_TIMEOUT_S) -> dict[str | None, Any]:
        """`method(*args)` on every Router replica, concurrently; each replica's answer, or the exception it raised
        (a timeout past `timeout_s`, None: none), by replica id. Before this process knows the replicas, one call to
        any replica (under None): it initialises the handle, and the caller's next round reaches them all."""
        known = self.members()
        targets: list[RouterTarget | None] = [RouterTarget(r) for r in known] or [None]

        async def one(target: RouterTarget | None) -> Any:
            return await asyncio.wait_for(separate_call(self.handle, method, *args, *([target] if target else [])),
                                          timeout_s)

        answers = await asyncio.gather(*(one(t) for t in targets), return_exceptions=True)
        return {t.replica_id if t else None: a for t, a in zip(targets, answers)}

    def each_nowait(self, method: str, *args: Any) -> None:
        """`method(*args)` sent to every Router replica without waiting for the answers (batched signals)."""
        known = self.members()
        for target in [RouterTarget(r) for r in known] or [None]:
            try:
                separate_call(self.handle, method, *args, *([target] if target else []))
            except Exception:  # a Router replica restarting: the signals' leases lapse on their own there
                logger.warning("router %s to %s failed", method, target, exc_info=True)

    def to_primary(self, method: str, *args: Any) -> Any:
        """`method(*args)` on the primary (the run-time adapter bookkeeping)."""
        primary = self.primary()
        return self.to(primary.replica_id if primary else None, method, *args)

    def to(self, replica_id: str | None, method: str, *args: Any) -> Any:
        """`method(*args)` on one Router replica (None: any), returning Serve's response."""
        return separate_call(self.handle, method, *args, *([RouterTarget(replica_id)] if replica_id else []))
