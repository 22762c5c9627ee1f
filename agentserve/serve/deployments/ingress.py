"""The HTTP ingress deployment: builds the ingress's parts from its handles and serves `make_app(parts)`.

Everything it serves is plain Python in agentserve/ingress; this module only wires Serve's handles, the tokenizers
and the state backend into it, and tells an engine replica's death (Ray's RayActorError) from other failures."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.handle import DeploymentHandle

from agentserve.apis.models import Catalog
from agentserve.apis.responses.store import ResponseStore
from agentserve.config import ResolvedCatalog, ServeArgs
from agentserve.doctor import PrefixDoctor
from agentserve.ingress.app import IngressParts, make_app
from agentserve.ingress.context import IngressContext
from agentserve.ingress.lifecycle import RequestPath
from agentserve.ingress.observers.setup import observers_from
from agentserve.ingress.output.detokenize import special_tokens
from agentserve.preprocess.tokenizer import load_tokenizer
from agentserve.serve import client_headers
from agentserve.serve.handles import on_this_process
from agentserve.serve.heap import freeze_startup_heap
from agentserve.serve.ray_metrics import start_export
from agentserve.serve.state_args import secret_keys_at_start
from agentserve.state import open_backend
from agentserve.state.upkeep import TotalsRecount
from agentserve.traces.otel import open_spans

logger = logging.getLogger("ray.serve")


# Bounded queue in front of the ingress (Serve answers 503 past it); in-flight streams get a minute to drain.
@serve.deployment(name="Ingress", max_ongoing_requests=2048, max_queued_requests=1024, graceful_shutdown_timeout_s=60)
@serve.ingress()
class Ingress:
    def __init__(
        self,
        args: dict[str, Any],
        catalog: dict[str, Any],
        preprocessor: DeploymentHandle,
        router: DeploymentHandle,
        engines: dict[str, DeploymentHandle],  # per catalog model id
    ) -> None:
        # The secret key is read here, as this replica starts, never shipped in the args (state_args.py).
        config = secret_keys_at_start(ServeArgs.from_any(args))
        client_headers.install(config.limits.max_request_timeout_s)  # before Serve's HTTP server starts
        resolved = ResolvedCatalog.from_any(catalog)
        preprocessor, router = on_this_process(preprocessor), on_this_process(router)
        engines = {m: on_this_process(h) for m, h in engines.items()}
        start_export()  # /metrics shows this replica; Ray's metrics agent gets every replica
        catalog_names = Catalog(resolved.models)
        # One tokenizer per checkpoint (models that share weights share it), read once at start.
        by_path: dict[str, Any] = {}
        tokenizers: dict[str, Any] = {}
        for m in resolved.models:
            path = str(m.resolve_path())
            if path not in by_path:
                by_path[path] = load_tokenizer(path)
            tokenizers[m.id] = by_path[path]
            # The tokenizer's special tokens, read once; the log names those the configured parsers get to see.
            special_tokens(tokenizers[m.id]).kept(m.reasoning_parser, m.tool_call_parser)
        doctor = PrefixDoctor.from_args(config, tokenizers[resolved.default.id])
        self._ctx = IngressContext(
            args=config,
            catalog=catalog_names,
            path=RequestPath(
                config,
                preprocessor=preprocessor,
                router=router,
                engines=engines,
                tokenizers=tokenizers,
                doctor=doctor,
                observers=observers_from(config, resolved, doctor),
                engine_died=lambda exc: isinstance(exc, RayActorError),
                spans=open_spans(config.request_traces, "Ingress"),
            ),
            preprocessor=preprocessor,
        )
        # The Responses store is the state backend itself (every replica opens it, as the kept turns), not a
        # deployment of its own: one process less at rest and one hop less on a `previous_response_id` turn.
        spec = config.response_store
        store = ResponseStore(
            max_entries=spec.max_entries, max_bytes=spec.max_bytes, ttl_s=spec.ttl_s, backend=open_backend(config.state),
            max_entries_per_owner=spec.max_entries_per_owner, max_bytes_per_owner=spec.max_bytes_per_owner,
        )
        interval = config.state.totals_recount_interval_s
        upkeep = TotalsRecount(open_backend(config.state), interval) if interval is not None else None
        self._parts = IngressParts(ctx=self._ctx, store=store, upkeep=upkeep)
        freeze_startup_heap()

    def __serve_build_asgi_app__(self) -> FastAPI:
        """Serve asks for the app once the replica is constructed: it is built from this replica's parts."""
        return make_app(self._parts)
