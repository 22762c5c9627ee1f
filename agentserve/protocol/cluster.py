"""Typed messages between deployments about the cluster rather than one request: an engine replica joining the
Router, the LoRA adapters loaded at run time, an adapter load's outcome on one replica, and the Router's and the
engine replicas' stats. One class per message shape; each travels over Ray handles as plain pickle
(serve/handles.py), so each is a module-level class.

Where each crosses:
  ReplicaRegistration  Engine replica -> Router.register (at start, and again when the Router has restarted)
  ModelAdapters        Router.adapters -> Engine replica (what it loads as it starts) and Ingress (catalog misses)
  AdapterLoadResult    Engine replica's load_adapter -> Ingress (POST /v1/admin/adapters)
  EngineReplicaStats   Engine replica's stats -> tests and benchmarks (a call pinned to each replica)
  RouterStats          Router.stats -> tests and benchmarks, with a ReplicaStats per engine replica and a
                       ModelRouterStats per catalog model
  RouterTarget         beside any call to the Router that must reach one Router replica (every replica's copy of
                       an engine's signals; a release to the Router that leased): serve/deployments/router_calls.py
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentserve.config import LoraAdapterSpec


@dataclass(frozen=True, slots=True)
class RouterTarget:
    """The Router replica a call is for (its Serve replica unique id)."""

    replica_id: str


@dataclass(frozen=True, slots=True)
class ReplicaRegistration:
    """What the Router learns as an engine replica registers."""

    model: str  # the catalog model the replica serves
    kv_endpoint: str | None = None  # where it publishes KV events (None: the Router learns approximately)
    replay_endpoint: str | None = None  # where missed KV events are replayed from
    # The LoRA adapters it holds beyond the declared ones: a restarted Router relearns run-time loads from these.
    adapters: tuple[LoraAdapterSpec, ...] = ()
    kv_capacity_tokens: int | None = None  # its KV cache (vLLM: num_gpu_blocks x block_size); None: not known


@dataclass(frozen=True, slots=True)
class ModelAdapters:
    """One catalog model's LoRA adapters loaded at run time, in load order."""

    model: str
    adapters: tuple[LoraAdapterSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class AdapterLoadResult:
    """One engine replica's answer to a run-time adapter load. `replica_id` says which replica answered (the caller
    pins the call and checks it); `error` is the engine's reason when it could not load it (the replica keeps
    serving)."""

    replica_id: str
    model: str
    adapters: tuple[str, ...]  # the ids of every adapter the replica serves after the call
    loaded: bool | None = None  # True: loaded now; False: it was loaded already (same path); None: error
    error: str | None = None


@dataclass(frozen=True, slots=True)
class EngineReplicaStats:
    """One engine replica's request counters (agentserve.engines.EngineStats, with who answered)."""

    replica_id: str
    model: str
    active: int  # requests admitted and not yet finished
    started: int  # requests ever started
    aborted: int  # requests ended early by the caller
    cached_blocks: int = 0


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """The Router's view of one engine replica: its leased load and the blocks each prefix index holds for it."""

    in_flight: int
    prefill_tokens: int  # uncached prompt tokens routed there and not yet prefilled
    active_blocks: float  # KV blocks held by requests routed there and not yet released
    indexed_blocks: int  # blocks in the index from its KV events
    learned_blocks: int  # blocks in the index learned from routing decisions
    model: str = ""  # the catalog model it serves


@dataclass(frozen=True, slots=True)
class ModelRouterStats:
    """The Router's totals for one catalog model."""

    replicas: tuple[str, ...]
    in_flight: int
    waiting: int
    rejected: int
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RouterStats:
    """Router.stats: every engine replica's view, totals, and per-model totals."""

    replicas: dict[str, ReplicaStats]
    in_flight: int  # leased requests, every model
    waiting: int  # in the admission queues
    rejected: int  # shed by admission
    counters: dict[str, int]  # routed, prefix, affinity, queued, lapsed
    calls: dict[str, int]  # Router calls by method (benchmarks count calls per request)
    events: dict[str, int]  # the KV event subscriber's counters ({} without KV events)
    models: dict[str, ModelRouterStats]
    router_id: str = ""  # the Router replica that answered

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data, for benchmark records."""
        return asdict(self)
