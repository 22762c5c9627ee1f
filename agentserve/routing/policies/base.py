"""The one interface behind which every routing policy sits.

KvRouter (routing/kv_router.py) owns the state: the prefix indexes, the load leases, the session table and the
admission queue. For each request it asks its policy two things, as SGLang's router asks a LoadBalancingPolicy to
`select_worker` among workers whose load it keeps itself:

- `overlaps`: how many leading blocks of the prompt each replica caches, read from the indexes the policy trusts;
- `pick`: which replica takes the request, given a `Placement` built from that overlap and the router's load view
  (None: every replica is saturated, so the request waits in admission).

Three flags tell the router what to keep for the policy: whether it subscribes to the engines' KV events
(`uses_events`), records routed prompts in its learned index (`learns`) and keeps each session's home replica
(`uses_sessions`). A policy holds no router state (round robin keeps only its turn). One policy per file,
registered by name in `policies/__init__.py`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from agentserve.routing.approx import ApproxIndex
from agentserve.routing.cost import Candidate, Choice, CostConfig, choose
from agentserve.routing.index import PrefixIndex


@dataclass(frozen=True, slots=True)
class PrefixIndexes:
    """The router's two prefix indexes, read-only to a policy."""

    reported: PrefixIndex  # from the engines' KV events (and simulated engines' stored hashes)
    learned: ApproxIndex  # from the router's own routing decisions (expires)


@dataclass(frozen=True, slots=True)
class Placement:
    """One request to place, as the policy sees it."""

    candidates: tuple[Candidate, ...]  # every replica the router knows, in the order they registered
    prompt_tokens: int
    new_blocks: float  # KV blocks the request will hold (prompt plus expected output)
    session_replica: str | None = None  # the replica of the session's last turn (policies that use sessions)
    new_session: bool = False  # a session the router has no home for yet


@runtime_checkable
class RoutingPolicy(Protocol):
    name: ClassVar[str]  # as in RouterSpec.policy
    uses_events: ClassVar[bool]  # the Router subscribes to engine KV events for it
    learns: ClassVar[bool]  # routed prompts enter the learned index
    uses_sessions: ClassVar[bool]  # the router keeps each session's home replica and passes it in the Placement

    def overlaps(self, indexes: PrefixIndexes, block_hashes: list[int]) -> dict[str, int]:
        """Leading blocks of `block_hashes` each replica caches, as far as this policy looks (replicas with none
        may be left out)."""
        ...

    def pick(self, placement: Placement, cfg: CostConfig, rng: random.Random) -> Choice | None:
        """The replica for this request, or None when it must wait (every candidate saturated). Never called
        with no candidates."""
        ...


def by_cost(placement: Placement, cfg: CostConfig, rng: random.Random) -> Choice | None:
    """The cost rule of routing/cost.py over a placement (kv, approx and least_loaded differ only in the overlaps
    they read)."""
    return choose(
        list(placement.candidates),
        prompt_tokens=placement.prompt_tokens,
        new_blocks=placement.new_blocks,
        cfg=cfg,
        session_replica=placement.session_replica,
        new_session=placement.new_session,
        rng=rng,
    )
