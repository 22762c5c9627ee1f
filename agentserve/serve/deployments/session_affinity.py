"""A Ray Serve RequestRouter that keeps a session's Preprocessor calls on one replica.

A replica that served a session's last turn holds what makes the next one cheap: the conversation the Ingress sent
(so the next crosses as its new turns), the previous prompt's ids and block hashes, the rendered spans. Serve's
default (power of two choices) sends about half of a long session's turns to a replica that has none of it, which
then rebuilds the prompt from the kept turns and is sent the conversation again. Here each call that carries a
`SessionAffinity` goes to the replica that scores highest for its key (rendezvous hashing: every Ingress replica's
router agrees without sharing state, and a replica added or gone moves only the sessions it wins or held), and to
two others by load when that replica's queue is full. Calls without a session are routed as by Serve's default
(power of two choices).
"""

from __future__ import annotations

import hashlib
import random
from typing import List, Optional

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from agentserve.protocol import SessionAffinity
from agentserve.serve.deployments.pending_args import argument_of, back_off_between_rounds


def score(key: str, replica_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\x00{replica_id}".encode(), digest_size=8).digest(), "big")


def home_of(key: str, replicas: List[RunningReplica]) -> RunningReplica:
    """The replica a session belongs on among `replicas` (the same on every router that sees the same replicas)."""
    return max(replicas, key=lambda r: score(key, r.replica_id.unique_id))


def by_load(replicas: List[RunningReplica]) -> List[RunningReplica]:
    """Two of `replicas` at random, the less loaded of which Serve picks: its default, power of two choices."""
    return random.sample(replicas, min(2, len(replicas)))


class SessionAffinityRouter(RequestRouter):
    async def choose_replicas(
        self,
        candidate_replicas: List[RunningReplica],
        pending_request: Optional[PendingRequest] = None,
    ) -> List[List[RunningReplica]]:
        back_off_between_rounds(pending_request)
        affinity = argument_of(pending_request, SessionAffinity)
        key = affinity.key if affinity is not None else ""
        if not key or len(candidate_replicas) < 2:
            return [by_load(candidate_replicas)]
        home = home_of(key, candidate_replicas)
        return [[home], by_load([r for r in candidate_replicas if r is not home])]
