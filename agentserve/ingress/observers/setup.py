"""Which observers an ingress replica runs, from its config."""

from __future__ import annotations

from agentserve.config import ResolvedCatalog, ServeArgs
from agentserve.doctor import PrefixDoctor
from agentserve.ingress.observers import TurnObserver
from agentserve.ingress.observers.doctor import DoctorRecorder
from agentserve.ingress.observers.kept_turns import KeptTurnWriter
from agentserve.ingress.observers.request_traces import RequestTraces
from agentserve.ingress.observers.speculative import SpeculativePrefill
from agentserve.ingress.observers.usage import UsageMetrics
from agentserve.state.kept_turns import open_kept_turns
from agentserve.traces.setup import open_request_traces


def observers_from(args: ServeArgs, catalog: ResolvedCatalog, doctor: PrefixDoctor) -> list[TurnObserver]:
    """Usage metrics, the doctor's memory, request traces (when on), kept turns (when on), speculative prefill; in that order, so a kept
    turn is handed to the store before a speculative prefill of the next turn is sent."""
    observers: list[TurnObserver] = [UsageMetrics(), DoctorRecorder(doctor)]
    writer = open_request_traces(args)
    if writer is not None:
        block_size = {m.id: catalog.engine(m.id).block_size for m in catalog.models}
        observers.append(RequestTraces(writer, block_size=block_size,
                                       session_memo_bytes=args.request_traces.session_memo_bytes))
    kept = open_kept_turns(args.kept_turns, args.state)
    if kept is not None:
        observers.append(KeptTurnWriter(kept, args.kept_turns.commit_wait_s))
    observers.append(
        SpeculativePrefill(
            block_size={m.id: catalog.engine(m.id).block_size for m in catalog.models},
            enabled=args.router.speculative_prefill,
            max_in_flight=args.router.max_speculative_prefills,
            token_exact=kept is not None,
        )
    )
    return observers
