"""Token totals per model as Prometheus metrics, from every request's end; turns the server ended itself."""

from __future__ import annotations

from agentserve import metrics
from agentserve.ingress.observers import TurnEnded


class UsageMetrics:
    def turn_ended(self, ended: TurnEnded) -> None:
        state = ended.state
        if state is None or not ended.metered:
            return
        model = ended.model
        metrics.PROMPT_TOKENS.labels(model).inc(state.prompt_tokens)
        metrics.CACHED_TOKENS.labels(model).inc(state.cached_tokens)
        metrics.COMPLETION_TOKENS.labels(model).inc(state.completion_tokens)
        if state.prompt_tokens:
            metrics.CACHED_RATIO.labels(model).observe(state.cached_tokens / state.prompt_tokens)
        if state.cut:
            metrics.TURNS_CUT.labels(model, "loop" if state.loop_period is not None else "cap").inc()
