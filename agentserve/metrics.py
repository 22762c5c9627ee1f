"""agentserve's Prometheus metrics, recorded in whichever replica process observes them.

GET /metrics on the ingress shows one ingress replica's registry. In a cluster, every replica process mirrors
this registry into Ray's metrics agent (serve/ray_metrics.py), which Prometheus scrapes on each node's
metrics port as `ray_<name>` with Serve's `deployment` and `replica` tags.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

REQUESTS = Counter(
    "agentserve_requests_total", "Requests by API, model and HTTP status", ["api", "model", "status"],
    registry=REGISTRY,
)
REQUESTS_BY_KIND = Counter(
    "agentserve_requests_by_kind_total",
    "Admitted requests by what triggered them (user_message, tool_result, compaction, subagent_spawn, other)",
    ["api", "model", "kind"], registry=REGISTRY,
)
TTFT = Histogram(
    "agentserve_time_to_first_token_seconds", "Time from request arrival to the first output token",
    ["api", "model"], buckets=_LATENCY_BUCKETS, registry=REGISTRY,
)
ITL = Histogram(
    "agentserve_inter_token_latency_seconds", "Time between output chunks divided by tokens in the chunk",
    ["model"], buckets=(0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1), registry=REGISTRY,
)
PROMPT_TOKENS = Counter(
    "agentserve_prompt_tokens_total", "Prompt tokens", ["model"], registry=REGISTRY
)
CACHED_TOKENS = Counter(
    "agentserve_cached_prompt_tokens_total", "Prompt tokens served from the prefix cache", ["model"],
    registry=REGISTRY,
)
CACHED_RATIO = Histogram(
    "agentserve_cached_token_ratio", "Per request: cached prompt tokens / prompt tokens", ["model"],
    buckets=(0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0), registry=REGISTRY,
)
COMPLETION_TOKENS = Counter(
    "agentserve_completion_tokens_total", "Output tokens", ["model"], registry=REGISTRY
)
PREFIX_REUSE = Histogram(
    "agentserve_prefix_reuse_ratio",
    "Per turn of a session: leading tokens of the prompt equal to the previous turn's prompt + output, as a ratio",
    ["model"], buckets=(0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 1.0), registry=REGISTRY,
)
PREFIX_DIVERGENCES = Counter(
    "agentserve_prefix_divergences_total", "Turns whose prompt did not extend the previous turn, by cause",
    ["model", "cause"], registry=REGISTRY,
)
REPLAY_REORDERED = Counter(
    "agentserve_replay_reordered_turns_total",
    "Assistant turns whose interleaved reasoning the chat template could not replay in order", ["model"],
    registry=REGISTRY,
)
REPLAY_TURNS = Counter(
    "agentserve_replay_turns_total",
    "Earlier assistant turns by how they were replayed: spliced (the generated tokens, as kept) or re-rendered by "
    "the template, with why (not_kept, template_changed, prompt_changed, end_of_turn, render_failed)",
    ["model", "outcome"], registry=REGISTRY,
)
TURNS_CUT = Counter(
    "agentserve_turns_cut_total",
    "Turns the server ended itself, reported as a normal end: cap (the model's max_output_tokens with "
    "max_output_tokens_finish: stop) or loop (stop_repetition: the output had become a loop)",
    ["model", "why"], registry=REGISTRY,
)
WARM_START_TOKENS = Counter(
    "agentserve_warm_start_tokens_total",
    "Prompt tokens a new engine replica sent in its warm start: prefilled, or cached already (a shared prefix)",
    ["model", "kind"], registry=REGISTRY,
)
WARM_START_SESSIONS = Counter(
    "agentserve_warm_start_sessions_total",
    "Sessions a new engine replica's warm start planned: warmed, or left (the time bound, an engine error)",
    ["model", "outcome"], registry=REGISTRY,
)
REQUEST_TRACES = Counter(
    "agentserve_request_traces_total",
    "Request trace records (ServeArgs.request_traces): written, or dropped (the writer's queue was full or the "
    "disk failed)", ["outcome"], registry=REGISTRY,
)
KEPT_TURNS = Counter(
    "agentserve_kept_turns_total",
    "Finished turns handed to the kept-turn store: kept (committed before the stream ended), pending (still "
    "queued when the end could wait no longer), refused (queue full or database error)",
    ["model", "result"], registry=REGISTRY,
)
RESPONSES_NOT_STORED = Counter(
    "agentserve_responses_not_stored_total",
    "Responses asked to be stored (`store` not false) that were answered but not stored: too_large (past the "
    "store's or the owner's byte cap) or failed (the database refused); `previous_response_id` cannot name them",
    ["reason"], registry=REGISTRY,
)
CONVERSATION_CROSSINGS = Counter(
    "agentserve_conversation_crossings_total",
    "Conversations sent to the Preprocessor, by form: delta (only the turns after the session's previous request), "
    "whole, or resent (a delta whose base the Preprocessor replica did not hold, then sent whole)",
    ["form"], registry=REGISTRY,
)
PREAMBLE_STRIPPED = Counter(
    "agentserve_anthropic_preamble_stripped_total",
    "Anthropic requests whose x-anthropic-billing-header line was removed from the system prompt",
    ["endpoint"], registry=REGISTRY,
)

# -- request path stages, routing, parsing (ingress process) ------------------------------------------
QUEUE_TIME = Histogram(
    "agentserve_queue_time_seconds",
    "Time a request spends before reaching its engine, by stage (preprocess, route; each includes Serve queueing)",
    ["model", "stage"], buckets=_LATENCY_BUCKETS, registry=REGISTRY,
)
ROUTE_DECISIONS = Counter(
    "agentserve_route_decisions_total", "Engine replica choices by model and the router's reason", ["model", "reason"],
    registry=REGISTRY,
)
ROUTE_OVERLAP = Histogram(
    "agentserve_route_overlap_blocks", "Prefix blocks the router expected the chosen replica to have cached",
    ["model"],
    buckets=(0, 1, 4, 16, 64, 256, 1024, 4096, 16384), registry=REGISTRY,
)
PARSER_ERRORS = Counter(
    "agentserve_parser_errors_total", "Tool-call regions the parser could not complete, by kind (error, truncated)",
    ["model", "kind"], registry=REGISTRY,
)
TOOL_DISPATCH_LEAD = Histogram(
    "agentserve_tool_dispatch_lead_seconds",
    "Per tool call: how long before the end of the turn its complete call was sent to the client",
    ["model"], buckets=(0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), registry=REGISTRY,
)

# -- engine replica processes (one series per replica once exported through Ray) ------------------------
ENGINE_TTFT = Histogram(
    "agentserve_engine_time_to_first_token_seconds",
    "Engine replica: request received to first token (engine scheduler queue + prefill)",
    ["model"], buckets=_LATENCY_BUCKETS, registry=REGISTRY,
)
ENGINE_PROMPT_TOKENS = Counter(
    "agentserve_engine_prompt_tokens_total", "Prompt tokens admitted by this engine replica", ["model"],
    registry=REGISTRY,
)
ENGINE_CACHED_TOKENS = Counter(
    "agentserve_engine_cached_prompt_tokens_total", "Prompt tokens this engine replica served from its prefix cache",
    ["model"], registry=REGISTRY,
)
ENGINE_PENDING_PREFILL = Gauge(
    "agentserve_engine_pending_prefill_tokens",
    "Uncached prompt tokens admitted but not yet prefilled (the engine autoscaling signal)", ["model"],
    registry=REGISTRY,
)
ENGINE_RUNNING = Gauge(
    "agentserve_engine_running_requests", "Requests streaming from this engine replica", ["model"],
    registry=REGISTRY,
)
