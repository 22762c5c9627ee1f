"""POST /v1/admin/adapters: load a LoRA adapter of a catalog model on every replica of its Engine deployment at
run time, then serve it under its id (errors in OpenAI's envelope).

Order of a load: the Router reserves the names (so a second load of one id is refused, even through another
Ingress replica), every replica the Router knows for the model loads it (each call pinned to its replica, and
checked to have been answered by it), the Router commits it (replicas that start later load it before they
register), and this replica's catalog serves it; other Ingress replicas learn it from the Router on a miss.
A failure on any replica releases the names: the adapter is not served, and the answer names the replicas that
had loaded it (an engine cannot unload one; it is inert there until a restart).

What an admin key may name is bounded: the path must resolve (realpath, so no `..` or symlink leads out) under
ServeArgs.admin.adapter_root, an absolute directory, so it is never a hub id (vLLM downloads a path it does not
find locally from the hub); the names are checked by the Router's registry (serve/adapter_registry.py). An engine's
own error text stays in the engine's log: the answer names the replicas that failed, not why (it could carry file
contents or paths).
"""

from __future__ import annotations

import asyncio
import logging
import os

from fastapi import Request
from fastapi.responses import JSONResponse

from agentserve.apis.admin_adapters import LoadAdapterRequest, loaded_body
from agentserve.config import LoraAdapterSpec
from agentserve.protocol import RouteDecision
from agentserve.protocol.cluster import AdapterLoadResult
from agentserve.protocol.errors import RequestError
from agentserve.ingress.context import IngressContext
from agentserve.ingress.http import parse_body

logger = logging.getLogger("ray.serve")

PINNED_ATTEMPTS = 3  # a pinned call Serve sent elsewhere (its replica was still joining or leaving): asked again


class AdapterAdmin:
    def __init__(self, ctx: IngressContext) -> None:
        self._ctx = ctx

    async def load(self, request: Request) -> JSONResponse:
        body = await parse_body(request, LoadAdapterRequest, self._ctx.args.limits)
        served = await self._ctx.lookup(body.model)
        if served.adapter is not None:
            raise RequestError(
                "invalid_request",
                f"'{body.model}' is the LoRA adapter {served.adapter.id} of {served.model.id}: name the base model",
                param="model",
            )
        model, spec = served.model.id, body.spec()
        spec = spec.model_copy(update={"path": adapter_path(self._ctx.args.admin.adapter_root, spec.path)})
        routers = self._ctx.path.routers  # the bookkeeping is the primary Router replica's
        await routers.to_primary("claim_adapter", model, spec)  # RequestError if a name is served already
        done: dict[str, list[str]] = {}
        try:
            done = await self._load_everywhere(model, spec)
        except BaseException:
            await routers.to_primary("release_adapter", model, spec.id)
            raise
        await routers.to_primary("commit_adapter", model, spec.id)
        # A replica that registered while the loads ran had already fetched the list (with this load pending);
        # one more pass catches any that registered just before the commit.
        for rid, adapters in (await self._load_on_new(model, spec, set(done))).items():
            done[rid] = adapters
        self._ctx.catalog.add_adapter(model, spec)
        return JSONResponse(loaded_body(model, spec, list(done)))

    async def _load_everywhere(self, model: str, spec: LoraAdapterSpec) -> dict[str, list[str]]:
        replicas = list(await self._ctx.path.router.replicas.remote(model))
        if not replicas:
            raise RequestError(
                "overloaded", f"no engine replica of {model} is running: load the adapter once one is", retry_after=5
            )
        answers = await asyncio.gather(*(self._load_on(model, spec, rid) for rid in replicas), return_exceptions=True)
        loaded = {rid: a for rid, a in zip(replicas, answers) if isinstance(a, list)}
        failed = {rid: a for rid, a in zip(replicas, answers) if isinstance(a, BaseException)}
        if failed:
            for rid, exc in failed.items():
                logger.warning("replica %s could not load LoRA adapter %s from %s: %s", rid, spec.id, spec.path,
                               _reason(exc))  # fmt: skip
            reasons = "; ".join(f"replica {rid}: {_public_reason(exc)}" for rid, exc in sorted(failed.items()))
            also = (f" It was loaded on {', '.join(sorted(loaded))} before the failure and stays inert there "
                    "(not served)." if loaded else "")  # fmt: skip
            raise RequestError("invalid_request", f"cannot load LoRA adapter {spec.id!r} on {model}: {reasons}.{also}",
                               param="path", code="adapter_load_failed")  # fmt: skip
        return loaded

    async def _load_on_new(self, model: str, spec: LoraAdapterSpec, seen: set[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        try:
            for rid in set(await self._ctx.path.router.replicas.remote(model)) - seen:
                adapters = await self._load_on(model, spec, rid)
                if adapters is not None:
                    out[rid] = adapters
        except Exception:  # a newcomer loaded the pending list as it started: this pass only double-checks
            logger.warning("run-time adapter %s not confirmed on replicas that joined during the load", spec.id,
                           exc_info=True)  # fmt: skip
        return out

    async def _load_on(self, model: str, spec: LoraAdapterSpec, rid: str) -> list[str] | None:
        """Load on replica `rid`: the adapters it serves afterwards (None: it left meanwhile). ValueError with the
        engine's reason."""
        engine = self._ctx.path.unary_engines[model]
        route = RouteDecision(replica_id=rid, reason="only_replica")
        for _ in range(PINNED_ATTEMPTS):
            answer: AdapterLoadResult = await engine.load_adapter.remote(spec, route)
            if answer.replica_id != rid:  # Serve had no such replica at hand: is it still there?
                if rid not in await self._ctx.path.router.replicas.remote(model):
                    return None  # it left: nothing to load, and replicas that start later load it themselves
                await asyncio.sleep(0.5)
                continue
            if answer.error is not None:
                raise EngineRefused(answer.error)
            return list(answer.adapters)
        raise ValueError(f"calls pinned to replica {rid} were answered by other replicas {PINNED_ATTEMPTS} times")


class EngineRefused(ValueError):
    """The engine's own reason for not loading an adapter: logged, never sent back."""


def _public_reason(exc: BaseException) -> str:
    if isinstance(exc, EngineRefused):
        return "the engine refused it (the reason is in that replica's log)"
    if isinstance(exc, ValueError):  # this module's own words
        return str(exc)
    return f"{type(exc).__name__} (see the ingress log)"


def adapter_path(root: str | None, path: str) -> str:
    """`path` resolved (realpath) if it lies under `root`, else a RequestError that says where adapters may be."""
    if root is None:
        raise RequestError("invalid_request", "run-time adapters are off: set admin.adapter_root in the serve config "
                           "to the directory they are loaded from", param="path", code="adapter_root_unset")  # fmt: skip
    base = os.path.realpath(root)
    if not os.path.isabs(path):
        raise RequestError("invalid_request", f"`path` must be an absolute directory under {base} (a relative path "
                           "or a hub id is never loaded)", param="path", code="adapter_path_refused")  # fmt: skip
    real = os.path.realpath(path)
    if os.path.commonpath((base, real)) != base or real == base:
        raise RequestError("invalid_request", f"`path` must lie under the adapter root {base}", param="path",
                           code="adapter_path_refused")  # fmt: skip
    return real


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
