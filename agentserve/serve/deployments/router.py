"""Router deployment: picks the engine replica for each preprocessed request (agentserve.routing.KvRouter).

Each replica serves every catalog model, with a prefix index, load view and admission queue per model
(agentserve.routing.CatalogRouter): an engine replica registers under its model, a request is routed among its
model's replicas only. It holds the indexes in memory; it subscribes to each engine replica's KV event publisher as
the replica registers, and relearns everything from registrations and events after a restart. There may be several
replicas, each with the whole picture (serve/deployments/router_calls.py: engines signal every Router replica, a
session's route calls go to one): a Router replica's death costs the sessions it placed one re-placement, on the same
index, and no stream (streams never pass through a Router). Methods that a caller addresses to one replica take a
trailing `RouterTarget`, read by the request router and ignored here.
Engine replicas that Serve adds or removes (autoscaling, the dashboard) register and deregister
themselves; ones that die stop heartbeating, are reported by the ingress, and leave the index.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.exceptions import RayServeException

from agentserve.config import LoraAdapterSpec, ResolvedCatalog, ServeArgs
from agentserve.protocol import RouteDecision, RouteRequest, SessionAffinity
from agentserve.protocol.cluster import ModelAdapters, ReplicaRegistration, RouterStats, RouterTarget
from agentserve.routing.catalog_router import CatalogRouter
from agentserve.routing.cost import CostConfig
from agentserve.routing.kv_router import RouterConfig
from agentserve.routing.kv_subscriber import Events, KvEventSubscriber, Reset
from agentserve.routing.policies import POLICIES, PolicyName
from agentserve.routing.scheduling import SchedulingConfig
from agentserve.serve.adapter_registry import RuntimeAdapters
from agentserve.serve.heap import freeze_startup_heap
from agentserve.traces.otel import open_spans

logger = logging.getLogger("ray.serve")


def router_config(args: ServeArgs, block_size: int) -> RouterConfig:
    """The router settings for one catalog model's replicas (`block_size`: its engine's)."""
    r = args.router
    return RouterConfig(
        cost=CostConfig(
            block_size=block_size,
            overlap_weight=r.overlap_weight,
            temperature=r.temperature,
            default_osl=r.default_osl,
            session_stay_tokens=r.session_stay_tokens,
            session_spread=r.session_spread,
            max_in_flight=r.max_in_flight_per_replica,
            max_active_tokens=r.max_active_tokens_per_replica,
            max_prefill_tokens=r.max_prefill_tokens_per_replica,
        ),
        scheduling=SchedulingConfig(**r.scheduling.model_dump()),
        policy=r.policy,
        expire_after_s=r.replica_timeout_s,
        approx_ttl_s=r.approx_ttl_s,
        max_waiting=r.max_waiting,
        max_wait_s=r.max_wait_s,
        retry_after_s=r.retry_after_s,
        lease_s=r.lease_s,
        resident_s=r.resident_s,
    )


def _own_replica_id() -> str:
    """This Router replica's Serve id ("" outside Serve: a test drives the class directly)."""
    try:
        return serve.get_replica_context().replica_id.unique_id
    except RayServeException:
        return ""


# Access logs off: every engine replica heartbeats and reports here.
@serve.deployment(
    name="Router",
    num_replicas=1,
    max_ongoing_requests=4096,
    logging_config={"enable_access_log": False},
    request_router_config=RequestRouterConfig(
        request_router_class="agentserve.serve.deployments.router_calls:RouterCallRouter"
    ),
)
class RouterReplica:
    """Nothing here runs on a timer: KV events wake the loop when they arrive, leases lapse when looked at
    (on routing, reports and heartbeats), so an idle router costs nothing."""

    def __init__(self, args: dict[str, Any], catalog: dict[str, Any]) -> None:
        self._args = ServeArgs.from_any(args)
        resolved = ResolvedCatalog.from_any(catalog)
        self._router = CatalogRouter.from_configs(
            {m.id: router_config(self._args, resolved.engine(m.id).block_size) for m in resolved.models}
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_pending = False
        # KV events only when the configured policy reads them (a later set_policy subscribes or unsubscribes nothing).
        events = POLICIES[self._args.router.policy].uses_events
        self._subscriber = KvEventSubscriber(on_update=self._wake) if events else None
        self._endpoints: dict[str, str] = {}
        self._calls: Counter[str] = Counter()  # per method: benchmarks check the router's calls per request
        self._spans = open_spans(self._args.request_traces, "Router")  # request spans (traces/otel.py)
        self._adapters = RuntimeAdapters(resolved.models, max_runtime=self._args.admin.max_runtime_adapters)  # LoRA adapters loaded at run time, per model
        self._id = _own_replica_id()  # in each decision: its release comes here
        freeze_startup_heap()

    def _block_size(self, model: str | None) -> int:
        return self._router.for_model(model).cfg.cost.block_size

    def _bind_loop(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()

    def _wake(self) -> None:
        """From the subscriber thread: schedule one drain on the router's loop (coalesced)."""
        loop = self._loop
        if loop is None or self._drain_pending:
            return
        self._drain_pending = True
        try:
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop closed: the replica is shutting down
            pass

    def _drain(self) -> None:
        self._drain_pending = False
        if self._subscriber is None:
            return
        try:
            for update in self._subscriber.drain():
                if isinstance(update, Events):
                    self._router.apply_events(update.replica, update.events)
                elif isinstance(update, Reset):
                    self._router.forget_cache(update.replica)
        except Exception:
            logger.exception("router drain failed")

    def _housekeeping(self) -> None:
        for replica in self._router.expire():
            self._forget(replica, "stopped heartbeating")
        self._router.sweep_leases()

    def _forget(self, replica: str, why: str) -> None:
        if self._subscriber is not None and self._endpoints.pop(replica, None):
            self._subscriber.remove(replica)
        logger.info("engine replica %s left the router index (%s)", replica, why)

    # -- engine replicas -------------------------------------------------------
    async def register(self, replica_id: str, info: ReplicaRegistration, target: RouterTarget | None = None) -> None:
        self._bind_loop()
        endpoint = info.kv_endpoint
        events = self._subscriber is not None and endpoint is not None
        kv_blocks = info.kv_capacity_tokens // self._block_size(info.model) if info.kv_capacity_tokens else None
        self._router.register(replica_id, info.model, events=events, kv_blocks=kv_blocks)
        for adapter in info.adapters:  # its run-time adapters: relearnt here after a Router restart
            if self._adapters.adopt(self._router.model_of(replica_id) or "", adapter):
                logger.info("run-time LoRA adapter %s relearnt from replica %s", adapter.id, replica_id)
        if events:
            self._endpoints[replica_id] = endpoint
            self._subscriber.add(replica_id, endpoint, info.replay_endpoint)
        logger.info(
            "engine replica %s of %s joined the router (%s)",
            replica_id, self._router.model_of(replica_id), endpoint or "approximate index",
        )

    async def heartbeat(
        self, replica_id: str, running: list[str] | None = None, target: RouterTarget | None = None
    ) -> bool:
        """Liveness plus lease renewal for the requests the replica still runs (all of them: those another Router
        replica leased count in its load here). False: unknown replica (the router restarted), which should
        register again."""
        self._bind_loop()
        self._calls["heartbeat"] += 1
        known = self._router.heartbeat(replica_id)
        if known:
            self._router.renew(replica_id, running or ())
        self._housekeeping()
        return known

    async def report(
        self, replica_id: str, first_tokens: list[str], finished: list[str], target: RouterTarget | None = None
    ) -> None:
        """An engine replica's batched request signals (first token, ended): never on a request's critical path."""
        self._calls["report"] += 1
        self._router.report(replica_id, first_tokens, finished)

    async def deregister(self, replica_id: str, target: RouterTarget | None = None) -> None:
        self._router.remove(replica_id)
        self._forget(replica_id, "deregistered")

    async def replica_failed(self, replica_id: str, target: RouterTarget | None = None) -> None:
        """The ingress saw this replica's actor die under a stream: stop routing to it now."""
        if replica_id in self._router.replicas():
            self._router.remove(replica_id)
            self._forget(replica_id, "actor died")

    # -- LoRA adapters loaded at run time (agentserve.serve.adapter_registry) -----------------------------
    async def claim_adapter(self, model: str, adapter: LoraAdapterSpec, target: RouterTarget | None = None) -> None:
        """Reserve a run-time adapter's names before its load (RequestError if one is served already)."""
        self._adapters.claim(model, adapter)

    async def commit_adapter(self, model: str, adapter_id: str, target: RouterTarget | None = None) -> None:
        self._adapters.commit(model, adapter_id)
        logger.info("LoRA adapter %s of %s loaded at run time", adapter_id, model)

    async def release_adapter(self, model: str, adapter_id: str, target: RouterTarget | None = None) -> None:
        self._adapters.release(model, adapter_id)

    async def adapters(
        self, model: str | None = None, pending: bool = False, target: RouterTarget | None = None
    ) -> tuple[ModelAdapters, ...]:
        """Run-time adapters: of one model (one entry, with `pending`: loads under way too, what a starting engine
        replica loads), or of every model that has some (what an Ingress adds on a catalog miss)."""
        return self._adapters.listing(model, pending=pending)

    # -- requests ----------------------------------------------------------------
    async def route(self, request: RouteRequest, affinity: SessionAffinity | None = None) -> RouteDecision:
        """Place a request and lease it a slot (released by the engine's report, the ingress, or expiry).
        `affinity`: the session, read by the request router (a session's placements stay on one Router replica)."""
        self._bind_loop()
        self._calls["route"] += 1
        self._drain()
        with self._spans.child("router.route", request.hints.trace) as span:
            decision = self._leased_here(await self._router.route(request))
            span.set({"agentserve.replica": decision.replica_id, "agentserve.route_reason": decision.reason,
                      "agentserve.overlap_blocks": decision.overlap_blocks})
            return decision

    async def route_to(
        self, request: RouteRequest, replica_id: str, affinity: SessionAffinity | None = None
    ) -> RouteDecision | None:
        self._drain()
        decision = self._router.route_to(request, replica_id)
        return None if decision is None else self._leased_here(decision)

    def _leased_here(self, decision: RouteDecision) -> RouteDecision:
        return decision if decision.replica_id is None else decision.model_copy(update={"router_id": self._id})

    async def release(self, request_id: str, model: str | None = None, target: RouterTarget | None = None) -> None:
        """The ingress's release for a request the engine never started (client gone, error before the stream)."""
        self._calls["release"] += 1
        self._router.release(request_id, model)

    # -- introspection -------------------------------------------------------------
    async def replicas(self, model: str | None = None) -> dict[str, int]:
        """In-flight requests per engine replica (of one model, or of all)."""
        return {r: v.in_flight for r, v in self._router.snapshot().items() if model in (None, v.model)}

    async def stats(self, target: RouterTarget | None = None) -> RouterStats:
        self._drain()
        self._router.sweep_leases(force=True)
        return RouterStats(
            replicas=self._router.snapshot(),
            in_flight=self._router.in_flight,
            waiting=self._router.waiting,
            rejected=self._router.rejected,
            counters=dict(self._router.counters),
            calls=dict(self._calls),
            events=dict(self._subscriber.stats) if self._subscriber else {},
            models=self._router.model_stats(),
            router_id=self._id,
        )

    async def set_policy(self, name: PolicyName, target: RouterTarget | None = None) -> None:
        """Benchmarks only: switch kv / approx / least_loaded / round_robin without redeploying."""
        self._router.set_policy(name)

    async def overlaps(self, block_hashes: list[int], model: str | None = None) -> dict[str, int]:
        """Cached prefix blocks per replica of `model` (None: the default model)."""
        self._drain()
        return self._router.overlaps(block_hashes, model)
