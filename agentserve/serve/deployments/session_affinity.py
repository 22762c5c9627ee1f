"""A Ray Serve RequestRouter that keeps a session's Preprocessor calls on one replica.

A replica that served a session's last turn holds what makes the next one cheap: the conversation the Ingress sent
(so the next crosses as its new turns), the previous prompt's ids and block hashes, the rendered spans. Serve's
default (power of two choices) sends about half of a long session's turns to a replica that has none of it, which
then rebuilds the prompt from the kept turns and is sent the conversation again. Here each call that carries a
`SessionAffinity` goes to the replica that scores highest for its key (rendezvous hashing: every Ingress replica's
router agrees without sharing state, and a replica added or gone moves only the sessions it wins or held), and to
the others, least loaded first, when that replica's queue is full. Calls without a session are routed by load.
"""

from __future__ import annotations

import hashlib
from typing import List, Optional

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from agentserve.protocol import SessionAffinity


def _affinity(pending: Optional[PendingRequest]) -> str:
    if pending is None:
        return ""
    for value in (*pending.args, *pending.kwargs.values()):
        if isinstance(value, SessionAffinity):
            return value.key
    return ""


def score(key: str, replica_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\x00{replica_id}".encode(), digest_size=8).digest(), "big")


def home_of(key: str, replicas: List[RunningReplica]) -> RunningReplica:
    """The replica a session belongs on among `replicas` (the same on every router that sees the same replicas)."""
    return max(replicas, key=lambda r: score(key, r.replica_id.unique_id))


class SessionAffinityRouter(RequestRouter):
    def initialize_state(self, affinity: bool = True, **kwargs) -> None:
        """`affinity=False` (request_router_kwargs): route every call by load, as Serve's default does."""
        self._affinity_on = affinity

    async def choose_replicas(
        self,
        candidate_replicas: List[RunningReplica],
        pending_request: Optional[PendingRequest] = None,
    ) -> List[List[RunningReplica]]:
        key = _affinity(pending_request) if self._affinity_on else ""
        if not key or len(candidate_replicas) < 2:
            return [candidate_replicas]
        return [[home_of(key, candidate_replicas)], candidate_replicas]
