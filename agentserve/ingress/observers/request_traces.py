"""Request traces: one record per request end (traces/record.py), handed to the background writer, and the
attributes of the request's root span.

The record is made on the event loop from what the request already holds (lineage and kind from the hints,
counts from the request state, timings from the lifecycle); its block hashes are computed on the writer's thread.
No payload: no text, no token id, no tool argument; tool calls by name only.

The gap (`gap_s`) is the time from the end of the session's previous response to this request's arrival, from a
bytes-bounded map on this Ingress replica. Sessions stick to an Ingress replica behind the HAProxy front (and a
single replica sees them all); a session whose requests reach several Ingress replicas gets a gap only where the
same replica saw its previous response (else None, as for a first request, or a session that the map's bound
pushed out). A request that arrived while an earlier one of its session was still running gets 0.
"""

from __future__ import annotations

import logging
from array import array
from typing import Any

from agentserve.bytes_lru import BytesLRU
from agentserve.ingress.middleware.auth import identity_of
from agentserve.ingress.observers import TurnEnded
from agentserve.protocol.conversation import ToolCallBlock
from agentserve.protocol.token_ids import TYPECODE
from agentserve.traces.record import TraceRecord
from agentserve.traces.writer import PendingRecord, RequestTraceWriter

logger = logging.getLogger("ray.serve")

KEY_ID_CHARS = 12  # a key's short id: this many hex digits of its sha256 digest (never the key)
SESSION_ENTRY_OVERHEAD = 96  # bytes a gap-map entry holds besides its key's characters
_EMPTY = array(TYPECODE)
_NO_KEY = identity_of(None)  # the identity of a caller that presented no key


def finish_of(ended: TurnEnded) -> tuple[str, int, tuple[str, ...]]:
    """(finish reason, HTTP status, tool-call names) of a request's end."""
    if ended.state is None:  # (observers hear of requests whose engine stream opened; a refusal is not one)
        return "cancelled", 499, ()
    reason = ended.state.finish_reason
    turn = ended.state.turn
    tools = tuple(b.name for b in turn.blocks if isinstance(b, ToolCallBlock)) if turn is not None else ()
    if reason is None or reason == "abort":
        return "cancelled", 499, tools
    if reason == "stop" and tools:
        return "tool_calls", 200, tools
    return reason, 200, tools


def record_fields(ended: TurnEnded) -> dict[str, Any]:
    """Every record field but the block hashes, block size and gap."""
    hints, pre, state, t = ended.request.hints, ended.prepared, ended.state, ended.timings
    finish, status, tools = finish_of(ended)
    fields: dict[str, Any] = {
        "request_id": ended.request.request_id,
        "session": (pre.report.session_key if pre is not None else "") or hints.session_id,
        "parent_session": hints.parent_session_id,
        "kind": hints.kind,
        "api": ended.api,
        "key": ended.scope[:KEY_ID_CHARS] if ended.scope and ended.scope != _NO_KEY else None,
        "model": ended.model,
        "adapter": pre.engine.adapter if pre is not None else None,
        "prompt_tokens": (state.prompt_tokens if state is not None else 0) or (pre.prompt_tokens if pre else 0),
        "cached_tokens": state.cached_tokens if state is not None else 0,
        "output_tokens": state.completion_tokens if state is not None else 0,
        "replica": ended.route.replica_id if ended.route is not None else None,
        "finish_reason": finish,
        "tool_calls": tools,
        "status": status,
    }
    if t is not None:
        fields["t"] = round(t.arrived_unix, 6)
        fields["duration_s"] = round(max(0.0, t.ended - t.arrived), 6)
        fields["queue_s"] = round(t.routed - t.arrived, 6) if t.routed is not None else None
        fields["ttft_s"] = round(t.first_token - t.arrived, 6) if t.first_token is not None else None
    return fields


def end_request_span(span: Any, ended: TurnEnded | None) -> None:
    """End a request's root span (traces/otel.py) with the record's fields as attributes."""
    if ended is None:
        span.end("ended before the engine stream opened (refused, failed or the client left)")
        return
    f = record_fields(ended)
    span.set({
        "agentserve.parent_session": f["parent_session"],
        "agentserve.request_kind": f["kind"],
        "agentserve.adapter": f["adapter"],
        "agentserve.replica": f["replica"],
        "gen_ai.usage.input_tokens": f["prompt_tokens"],
        "gen_ai.usage.output_tokens": f["output_tokens"],
        "agentserve.cached_tokens": f["cached_tokens"],
        "agentserve.finish_reason": f["finish_reason"],
        "agentserve.tool_calls": list(f["tool_calls"]),
        "http.response.status_code": f["status"],
    })
    span.end("engine error" if f["finish_reason"] == "error" else None)


class RequestTraces:
    """Writes one trace record per metered request end; remembers each session's last response end for the
    next request's gap."""

    def __init__(self, writer: RequestTraceWriter, *, block_size: dict[str, int], session_memo_bytes: int) -> None:
        self._writer = writer
        self._block_size = block_size  # per catalog model
        self._ends: BytesLRU[tuple[str, str], float] = BytesLRU(session_memo_bytes)

    @property
    def writer(self) -> RequestTraceWriter:
        return self._writer

    def turn_ended(self, ended: TurnEnded) -> None:
        if not ended.metered or ended.timings is None:
            return
        fields = record_fields(ended)
        session = fields["session"]
        if session:
            key = (ended.scope, session)
            previous = self._ends.get(key)
            if previous is not None:
                fields["gap_s"] = round(max(0.0, fields["t"] - previous), 6)
            if ended.state is not None and not ended.warm_only:  # a response the harness acts on
                end = fields["t"] + fields["duration_s"]
                self._ends.put(key, max(end, previous or 0.0), len(ended.scope) + len(session) + SESSION_ENTRY_OVERHEAD)
        pre = ended.prepared
        record = TraceRecord(block_size=self._block_size.get(ended.model, 1), **fields)
        output = array(TYPECODE, ended.state.output_ids) if ended.state is not None else _EMPTY
        self._writer.write(PendingRecord(
            record, pre.engine.token_ids if pre is not None else _EMPTY, output,
            cache_salt=pre.engine.cache_salt if pre is not None else None,
        ))

    def close(self) -> None:
        """The replica stops: what is queued goes to disk first (a blocking wait, run off the loop)."""
        self._writer.close()
