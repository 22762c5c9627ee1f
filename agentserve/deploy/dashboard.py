"""The Grafana dashboard (k8s/grafana-dashboard.json), built from PANELS so docs and the PNG use the same queries.

All series come from Ray's metrics agent on each pod (PodMonitor, port `metrics`): agentserve's own metrics
carry a `ray_` prefix and Serve's `deployment`/`replica` tags (agentserve/serve/ray_metrics.py); Serve's
own metrics are `ray_serve_*`; vLLM's engine metrics are `ray_vllm_*` on GPU deployments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RATE = "[1m]"


def _q(quantile: float, metric: str, by: str = "") -> str:
    group = f"le{', ' + by if by else ''}"
    return f"histogram_quantile({quantile}, sum by ({group}) (rate({metric}_bucket{RATE})))"


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: tuple[tuple[str, str], ...]  # (PromQL, legend)
    description: str = ""


PANELS: tuple[Panel, ...] = (
    Panel("Requests/s by model, API and status", "reqps",
          (("sum by (model, api, status) (rate(ray_agentserve_requests_total" + RATE + "))",
            "{{model}} {{api}} {{status}}"),)),
    Panel("Time to first token (ingress)", "s",
          ((_q(0.5, "ray_agentserve_time_to_first_token_seconds"), "p50"),
           (_q(0.95, "ray_agentserve_time_to_first_token_seconds"), "p95"),
           (_q(0.99, "ray_agentserve_time_to_first_token_seconds"), "p99"),
           (_q(0.95, "ray_agentserve_time_to_first_token_seconds", "model"), "p95 {{model}}")),
          "Request arrival at the ingress to the first output token leaving the engine (all models, and p95 per "
          "catalog model)."),
    Panel("Inter-token latency", "s",
          ((_q(0.5, "ray_agentserve_inter_token_latency_seconds"), "p50"),
           (_q(0.95, "ray_agentserve_inter_token_latency_seconds"), "p95"))),
    Panel("Queue time by stage (p95)", "s",
          ((_q(0.95, "ray_agentserve_queue_time_seconds", "stage"), "{{stage}}"),
           (_q(0.95, "ray_vllm_request_queue_time_seconds"), "vLLM scheduler")),
          "preprocess/route: ingress-side waits before the engine; engine: replica receipt to first token "
          "(scheduler queue + prefill); vLLM scheduler: waiting-queue time inside vLLM (GPU builds)."),
    Panel("Prefix-cache hit ratio per engine replica", "percentunit",
          (("sum by (replica) (rate(ray_agentserve_engine_cached_prompt_tokens_total" + RATE + ")) / "
            "sum by (replica) (rate(ray_agentserve_engine_prompt_tokens_total" + RATE + "))", "{{replica}}"),),
          "Cached prompt tokens / prompt tokens, per replica. A drop on one replica: routing lost affinity."),
    Panel("Pending prefill tokens per engine replica (autoscaling signal)", "short",
          (("sum by (replica) (ray_agentserve_engine_pending_prefill_tokens)", "{{replica}}"),
           ("sum by (replica) (ray_agentserve_engine_running_requests)", "running {{replica}}")),
          "Uncached prompt tokens admitted but not yet prefilled; PrefillPressurePolicy scales on this."),
    Panel("Engine time to first token per replica (p95)", "s",
          ((_q(0.95, "ray_agentserve_engine_time_to_first_token_seconds", "replica"), "{{replica}}"),)),
    Panel("Replicas per deployment", "short",
          (("count by (deployment) (ray_serve_deployment_replica_healthy == 1)", "{{deployment}}"),)),
    Panel("Router decisions/s", "ops",
          (("sum by (model, reason) (rate(ray_agentserve_route_decisions_total" + RATE + "))",
            "{{model}} {{reason}}"),)),
    Panel("Router prefix overlap (blocks)", "short",
          ((_q(0.5, "ray_agentserve_route_overlap_blocks", "model"), "p50 {{model}}"),
           (_q(0.95, "ray_agentserve_route_overlap_blocks", "model"), "p95 {{model}}"))),
    Panel("Prefix stability: reuse ratio and divergences", "short",
          ((_q(0.5, "ray_agentserve_prefix_reuse_ratio"), "reuse p50"),
           ("sum by (cause) (rate(ray_agentserve_prefix_divergences_total" + RATE + "))", "divergence {{cause}}/s"))),
    Panel("Parser errors and stripped preambles /s", "ops",
          (("sum by (kind) (rate(ray_agentserve_parser_errors_total" + RATE + "))", "parser {{kind}}"),
           ("sum (rate(ray_agentserve_anthropic_preamble_stripped_total" + RATE + "))", "preamble stripped"))),
    Panel("Tool-dispatch lead time", "s",
          ((_q(0.5, "ray_agentserve_tool_dispatch_lead_seconds"), "p50"),
           (_q(0.95, "ray_agentserve_tool_dispatch_lead_seconds"), "p95")),
          "How long before the end of the turn a complete tool call was announced to the client."),
    Panel("Tokens/s", "short",
          (("sum by (model) (rate(ray_agentserve_prompt_tokens_total" + RATE + "))", "prompt {{model}}"),
           ("sum by (model) (rate(ray_agentserve_cached_prompt_tokens_total" + RATE + "))", "prompt (cached) {{model}}"),
           ("sum by (model) (rate(ray_agentserve_completion_tokens_total" + RATE + "))", "completion {{model}}"))),
)


def _panel(i: int, p: Panel) -> dict[str, Any]:
    return {
        "id": i + 1,
        "type": "timeseries",
        "title": p.title,
        "description": p.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend}
            for j, (expr, legend) in enumerate(p.targets)
        ],
    }


def dashboard() -> dict[str, Any]:
    return {
        "uid": "agentserve",
        "title": "agentserve",
        "tags": ["agentserve", "ray", "vllm"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "15s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            ]
        },
        "panels": [_panel(i, p) for i, p in enumerate(PANELS)],
    }
