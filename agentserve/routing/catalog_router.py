"""One KvRouter per catalog model: each model's engine replicas have their own prefix index, load view and
admission queue, so a prefix cached by one model's replica is never a hit for another model's request.

An engine replica belongs to one model (it says which when it registers); a route request names its model.
Plain Python, as KvRouter: `serve/deployments/router.py` wraps it as the Router deployment.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Iterable

from agentserve.kv_events.format import KvEvent
from agentserve.protocol import RouteDecision, RouteRequest
from agentserve.protocol.cluster import ModelRouterStats, ReplicaStats
from agentserve.protocol.errors import RequestError
from agentserve.routing.kv_router import KvRouter, RouterConfig
from agentserve.routing.policies import PolicyName


class CatalogRouter:
    def __init__(self, routers: dict[str, KvRouter]) -> None:
        if not routers:
            raise ValueError("a catalog router needs at least one model")
        self.routers = routers
        self.default = next(iter(routers))  # the model a replica or call that names none belongs to
        self._model_of: dict[str, str] = {}  # engine replica -> its model

    @classmethod
    def from_configs(cls, configs: dict[str, RouterConfig]) -> "CatalogRouter":
        return cls({model: KvRouter(cfg) for model, cfg in configs.items()})

    def for_model(self, model: str | None) -> KvRouter:
        router = self.routers.get(model or self.default)
        if router is None:  # the ingress resolves names first: only a caller that skipped it gets here
            raise RequestError("not_found", f"model '{model}' is not served", param="model")
        return router

    def for_replica(self, replica: str) -> KvRouter | None:
        model = self._model_of.get(replica)
        return self.routers.get(model) if model is not None else None

    def model_of(self, replica: str) -> str | None:
        return self._model_of.get(replica)

    # -- membership -----------------------------------------------------------
    def register(self, replica: str, model: str | None, *, events: bool, kv_blocks: int | None = None) -> None:
        model = model or self.default
        router = self.for_model(model)
        previous = self._model_of.get(replica)
        if previous is not None and previous != model:  # an id reused under another model: leave the old index
            self.routers[previous].remove(replica)
        self._model_of[replica] = model
        router.register(replica, events=events, kv_blocks=kv_blocks)

    def heartbeat(self, replica: str) -> bool:
        router = self.for_replica(replica)
        return router is not None and router.heartbeat(replica)

    def remove(self, replica: str) -> list[str]:
        model = self._model_of.pop(replica, None)
        return self.routers[model].remove(replica) if model is not None else []

    def expire(self) -> list[str]:
        gone = [r for router in self.routers.values() for r in router.expire()]
        for r in gone:
            self._model_of.pop(r, None)
        return gone

    def replicas(self) -> list[str]:
        return sorted(self._model_of)

    # -- cache state ------------------------------------------------------------
    def apply_events(self, replica: str, events: list[KvEvent]) -> None:
        router = self.for_replica(replica)
        if router is not None:
            router.apply_events(replica, events)

    def forget_cache(self, replica: str) -> None:
        router = self.for_replica(replica)
        if router is not None:
            router.forget_cache(replica)

    def overlaps(self, block_hashes: list[int], model: str | None = None) -> dict[str, int]:
        return self.for_model(model).overlaps(block_hashes)

    # -- requests ---------------------------------------------------------------
    async def route(self, req: RouteRequest) -> RouteDecision:
        return await self.for_model(req.model).route(req)

    def route_to(self, req: RouteRequest, replica: str) -> RouteDecision | None:
        if self._model_of.get(replica) != req.model:  # never pin a request on another model's replica
            return None
        return self.routers[req.model].route_to(req, replica)

    def report(self, replica: str, first_tokens: Iterable[str], finished: Iterable[str]) -> None:
        router = self.for_replica(replica)
        if router is not None:
            router.report(first_tokens, finished, replica)

    def renew(self, replica: str, request_ids: Iterable[str]) -> None:
        """`request_ids`: every request the replica runs (its heartbeat)."""
        router = self.for_replica(replica)
        if router is not None:
            router.renew(request_ids, replica)

    def release(self, request_id: str, model: str | None = None) -> None:
        """A lease the ingress gives back; without the model, every model's router forgets the id (a no-op where
        it was never leased)."""
        for router in [self.routers[model]] if model in self.routers else self.routers.values():
            router.release(request_id)

    def sweep_leases(self, *, force: bool = False) -> None:
        for router in self.routers.values():
            router.sweep_leases(force=force)

    def set_policy(self, name: PolicyName) -> None:
        for router in self.routers.values():
            router.set_policy(name)

    # -- introspection ------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return sum(r.in_flight for r in self.routers.values())

    @property
    def waiting(self) -> int:
        return sum(r.waiting for r in self.routers.values())

    @property
    def rejected(self) -> int:
        return sum(r.rejected for r in self.routers.values())

    @property
    def counters(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for r in self.routers.values():
            total.update(r.counters)
        return dict(total)

    def snapshot(self) -> dict[str, ReplicaStats]:
        """Every replica's load and index size, each tagged with its model."""
        return {
            replica: replace(view, model=model)
            for model, router in self.routers.items()
            for replica, view in router.snapshot().items()
        }

    def model_stats(self) -> dict[str, ModelRouterStats]:
        return {
            model: ModelRouterStats(
                replicas=tuple(router.replicas()),
                in_flight=router.in_flight,
                waiting=router.waiting,
                rejected=router.rejected,
                counters=dict(router.counters),
            )
            for model, router in self.routers.items()
        }
