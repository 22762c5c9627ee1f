"""A Ray Serve RequestRouter that sends a request to the engine replica the Router chose.

It runs inside the caller's handle (the ingress), so honouring the decision costs no extra hop.
If the chosen replica is gone, Serve's candidates are used as they come.
"""

from __future__ import annotations

from typing import List, Optional

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from agentserve.protocol import RouteDecision
from agentserve.serve.deployments.pending_args import argument_of, back_off_between_rounds, pinned


class PinToChosenReplica(RequestRouter):
    async def choose_replicas(
        self,
        candidate_replicas: List[RunningReplica],
        pending_request: Optional[PendingRequest] = None,
    ) -> List[List[RunningReplica]]:
        back_off_between_rounds(pending_request)
        decision = argument_of(pending_request, RouteDecision)
        if decision is not None and decision.replica_id is not None:
            chosen = pinned(candidate_replicas, decision.replica_id)
            if chosen:
                return [chosen]
        return [candidate_replicas]
