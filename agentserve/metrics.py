"""Prometheus metrics of the ingress (served on GET /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry()

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

REQUESTS = Counter(
    "agentserve_requests_total", "Requests by API, model and HTTP status", ["api", "model", "status"],
    registry=REGISTRY,
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
PREAMBLE_STRIPPED = Counter(
    "agentserve_anthropic_preamble_stripped_total",
    "Anthropic requests whose x-anthropic-billing-header line was removed from the system prompt",
    ["endpoint"], registry=REGISTRY,
)
