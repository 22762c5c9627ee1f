"""One request trace record: what a replay needs to reproduce an agent session's load, and no payload.

Written by the Ingress as each request ends (when traces are switched on), produced by the synthetic
generator for benchmarks, and read by `agentserve bench replay TRACE`. A record carries sizes, timings,
lineage and block hashes, never text or token ids:

* `input_blocks` are the chained hashes of the prompt's full token blocks (`block_size` tokens each);
* `output_blocks` continue the same chain over the prompt followed by the output, for the full blocks past
  the prompt's last full block, so a replay knows which of the next turn's input blocks were already written
  by this turn's decode;
* hashes are 63-bit ints keyed by a trace salt (not the engines' cache hashes, and not comparable across
  salts), so a trace file reveals reuse, never content.

`gap_s` is the time from the session's previous response end to this request's arrival (None for the
session's first request): the tool gap the replay honours.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentserve.protocol.requests import RequestKind

TRACE_VERSION = 1


class TraceRecord(BaseModel):
    """One finished request (one JSON line)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1] = TRACE_VERSION
    request_id: str
    t: float  # arrival, unix seconds
    session: str | None = None
    parent_session: str | None = None
    kind: RequestKind = "other"
    api: str = ""  # "anthropic" | "responses" | "chat" | "" (synthetic)
    key: str | None = None  # the API key's short id (a digest prefix), for per-key shares; never the key
    model: str
    adapter: str | None = None
    prompt_tokens: int = Field(ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    replica: str | None = None
    queue_s: float | None = None  # arrival -> the Router's lease
    ttft_s: float | None = None  # arrival -> first engine token
    duration_s: float = Field(ge=0)  # arrival -> response end
    finish_reason: str | None = None  # "stop" | "length" | "tool_calls" | "error" | "cancelled" | ...
    tool_calls: tuple[str, ...] = ()  # parsed tool-call names, in order
    block_size: int = Field(gt=0)
    input_blocks: tuple[int, ...] = ()
    output_blocks: tuple[int, ...] = ()
    gap_s: float | None = None
    status: int = 200  # the HTTP status the client got (529 for overflow, 499 for a client that left)
