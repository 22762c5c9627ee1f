"""Typed messages that travel along the graph: ingress -> preprocessor -> router -> engine."""

from __future__ import annotations

import hashlib

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentserve.protocol.constraints import OutputFormat
from agentserve.protocol.conversation import Conversation
from agentserve.protocol.token_ids import TokenIds

# What triggered a request (ingress/lineage.py): the harness's user, a tool's result, a context compaction, a
# subagent's first request, or anything else (a continuation, a side request).
RequestKind = Literal["user_message", "tool_result", "compaction", "subagent_spawn", "other"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


def reasoning_effort(value: str | None, param: str) -> ReasoningEffort | None:
    """A wire API's effort value, checked: an unknown level is a 400 naming the API's field."""
    from typing import get_args

    from agentserve.protocol.errors import RequestError

    if value is None:
        return None
    if value not in get_args(ReasoningEffort):
        levels = ", ".join(get_args(ReasoningEffort))
        raise RequestError("invalid_request", f"{param} must be one of {levels}; got '{value}'", param=param)
    return value  # type: ignore[return-value]


class SamplingParams(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_tokens: int | None = None  # None: up to the model's context window
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # The engine stops at the first of these (so usage counts no token past it); the ingress cuts the text there.
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit), bias in [-100, 100]
    # None: no logprobs; k >= 0: each sampled token's logprob and its k most likely alternatives.
    logprobs: int | None = Field(default=None, ge=0, le=20)
    # Reasoning tokens allowed before the engine ends reasoning with the model's own end marker (None: no limit).
    thinking_budget: int | None = Field(default=None, ge=0)


class TraceContext(BaseModel):
    """One request's OpenTelemetry trace as it crosses the graph: the W3C `traceparent` of the Ingress's request
    span and the session its spans are tagged with."""

    model_config = ConfigDict(frozen=True)

    traceparent: str
    session: str | None = None


class AgentHints(BaseModel):
    """Scheduling hints a harness may send (`nvext.agent_hints` or `x-agentserve-*` headers)."""

    model_config = ConfigDict(frozen=True)

    priority: int = 0
    latency_sensitivity: float | None = None
    osl: int | None = None  # expected output length
    session_id: str | None = None
    parent_session_id: str | None = None  # the session that spawned this one (a subagent's parent)
    kind: RequestKind = "other"
    # After the turn, prefill the next turn's predicted prefix (this turn as it will be replayed) on its replica.
    speculative_prefill: bool = False
    # The Ingress's request span (traces/otel.py), set by the Ingress when spans are exported, never read from a
    # client: the Preprocessor's and Router's spans are its children.
    trace: "TraceContext | None" = None


class GenerationRequest(BaseModel):
    """What every wire API decodes into: one conversation to continue, API-neutral."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    model: str
    conversation: Conversation
    sampling: SamplingParams = SamplingParams()
    hints: AgentHints = AgentHints()
    # Extra chat-template variables the client asked for (e.g. enable_thinking).
    template_kwargs: dict[str, Any] = Field(default_factory=dict)
    # The client's thinking switch: None = not said (thinking stays on where the model has it).
    thinking: bool | None = None
    output_format: OutputFormat | None = None  # None: free text
    # How hard to think: "none" turns thinking off; other levels map to a budget per model (ModelSpec).
    reasoning_effort: ReasoningEffort | None = None

    def session_key(self) -> str:
        """The client's session id, else a hash of the first user turn (stable across turns, unlike the system
        prompt); "" without either."""
        if self.hints.session_id:
            return self.hints.session_id
        for turn in self.conversation.turns:
            if turn.role == "user":
                return "h:" + hashlib.blake2b(turn.text().encode(), digest_size=8).hexdigest()
        return ""


class EngineRequest(BaseModel):
    """What an engine replica needs to run one request, and nothing else: this is all that crosses to it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    request_id: str
    model: str
    token_ids: TokenIds  # packed, read-only (protocol/token_ids.py): unpacked only by the engine's own call
    sampling: SamplingParams
    max_tokens: int  # resolved against the context window
    adapter: str | None = None  # the LoRA adapter id that serves this request; None: the base model
    # The caller's prefix-cache partition (vLLM's `cache_salt`, kv_events/block_hash.py `cache_salt`); None: shared.
    cache_salt: str | None = None
    priority: int = 0  # the (authorized) priority hint: higher is scheduled first where the engine can
    reasoning_started: bool = False  # the prompt already opened a reasoning block (a thinking budget counts from it)
    # xgrammar structural tag (JSON) the output must match: tool choice, strict tools, output format; None: free.
    structural_tag: str | None = None
    # Last user / tool-result text, set only for the scripted test double (what its rules match on).
    match_text: str = ""
    # A vision model's images, encoded (PNG, JPEG, ...), in the order of their placeholders in token_ids: vLLM's
    # multi-modal data. Encoded, not decoded: a screenshot crosses the Ray hop as its file, not as its pixels.
    images: tuple[bytes, ...] = ()
    trace: "TraceContext | None" = None  # the Ingress's request span (AgentHints.trace): the engine's is its child

    @property
    def prompt_tokens(self) -> int:
        return len(self.token_ids)


class PromptReport(BaseModel):
    """What the Preprocessor tells the ingress about the prompt it made; it never leaves the ingress."""

    model_config = ConfigDict(frozen=True)

    # What the client asked for when that was more than the window leaves (EngineRequest.max_tokens is then
    # clamped to what is left).
    requested_max_tokens: int | None = None
    # The model's server-side cap (ModelSpec.max_output_tokens) is what set EngineRequest.max_tokens.
    capped_by_server: bool = False
    parse_reasoning: bool = True  # False when the client turned thinking off
    # Identifies the conversation across turns (client session id, else a hash of its first user turn).
    session_key: str = ""
    replay_reordered: int = 0  # assistant turns whose reasoning order the template could not keep
    # Token-exact replay (preprocess/splice.py): the conversation's digest, under which the ingress keeps the turn
    # this request generates; how each earlier assistant turn was replayed (outcome, count); whether the last one
    # was re-rendered by the template rather than placed as generated.
    replay_prefix: str = ""
    replay_outcomes: tuple[tuple[str, int], ...] = ()
    replay_last_rerendered: bool = False
    # The prompt as a link for the kept turn this request generates: the kept turn it continues, and where the
    # prompt's own tail starts in EngineRequest.token_ids (None: keep the turn without a link).
    replay_base: str = ""
    replay_tail_from: int | None = None


class Preprocessed(BaseModel):
    """The Preprocessor's answer, split by consumer: the engine's request, the router's, the ingress's report."""

    model_config = ConfigDict(frozen=True)

    engine: EngineRequest
    route: "RouteRequest"
    report: PromptReport = PromptReport()

    @property
    def prompt_tokens(self) -> int:
        return self.engine.prompt_tokens


class RouteRequest(BaseModel):
    """What the Router needs to place a request: block hashes and counts, never the token list."""

    model_config = ConfigDict(frozen=True)

    request_id: str  # server-made, unique: the router's lease is held under it
    model: str
    block_hashes: list[int]
    prompt_tokens: int
    max_tokens: int
    hints: AgentHints = AgentHints()
    session_key: str = ""
    parent_session_key: str = ""  # the parent session's key, scoped like session_key ("": none)
    tenant: str = ""  # the caller's key digest: per-key shares at admission (routing/scheduling/key_shares.py)
    # The conversation already has a reply in it: a session's later turn, never a new session, even at a Router
    # replica that has not placed it before (its own Router died, or a compaction moved it).
    continues: bool = False


Preprocessed.model_rebuild()


class RouteDecision(BaseModel):
    """Which engine replica serves a request, and why."""

    model_config = ConfigDict(frozen=True)

    replica_id: str | None  # Ray Serve replica unique id; None = let Serve pick
    overlap_blocks: int = 0
    reason: Literal["least_loaded", "prefix", "affinity", "only_replica", "no_replica"] = "least_loaded"
    router_id: str | None = None  # the Router replica that leased it (its release goes there)


class SessionAffinity(BaseModel):
    """The session a Preprocessor or Router call belongs to (`caller_session`'s key), read by those deployments'
    request routers (serve/deployments/session_affinity.py, router_calls.py): a session's calls go to one replica,
    whose memos and placements of it are warm, from every Ingress replica."""

    model_config = ConfigDict(frozen=True)

    key: str


def caller_session(scope: str, session: str) -> str:
    """A session key that does not mix callers: the caller's identity and its session, digested ("": no session).
    Another key naming the same session id gets another key, so it cannot steer the first caller's routing."""
    if not session:
        return ""
    return hashlib.blake2b(f"{scope}\x00{session}".encode(), digest_size=16).hexdigest()


FinishReason = Literal["stop", "length", "abort", "error"]


class TokenLogprob(BaseModel):
    """One generated token's log probability and its most likely alternatives (token id, logprob), best first."""

    model_config = ConfigDict(frozen=True)

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


class EngineDelta(BaseModel):
    """New tokens from the engine; one or more coalesced engine steps."""

    model_config = ConfigDict(frozen=True)

    token_ids: list[int]
    finish_reason: FinishReason | None = None
    num_cached_tokens: int | None = None  # set on the first delta
    prompt_tokens: int | None = None  # set on the first delta
    error: str | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None  # one per token id, when the request asked for them
