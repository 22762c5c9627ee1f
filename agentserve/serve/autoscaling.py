"""Engine autoscaling on prefill pressure, not on ongoing requests.

Why: an agent turn is one long-lived stream whose cost is dominated by how many *uncached* prompt tokens
it brings. Ten warm turns (prefix cached) and ten cold 100k-token turns are the same "ongoing requests"
but differ by 100x in prefill work, and TTFT follows the prefill queue. So each engine replica reports
the uncached prompt tokens it has admitted but not yet started decoding (`pending_prefill_tokens`) and
its recent time to first token; the policy sizes the deployment so the prefill backlog per replica stays
near a target and adds a replica whenever TTFT is over target. Serve's wrapper then applies
upscale/downscale delays, scaling factors and min/max bounds (`ray.serve.autoscaling_policy`).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

PENDING_PREFILL = "pending_prefill_tokens"
RECENT_TTFT = "recent_ttft_s"
RUNNING = "running_requests"


@dataclass
class PrefillTracker:
    """Per engine replica: prefill backlog and recent TTFT (plain Python, fed by EngineReplica.generate)."""

    window_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _pending: dict[str, int] = field(default_factory=dict)
    _running: int = 0
    _ttfts: deque[tuple[float, float]] = field(default_factory=deque)

    def admitted(self, request_id: str, uncached_tokens: int) -> None:
        self._pending[request_id] = max(0, uncached_tokens)
        self._running += 1

    def first_token(self, request_id: str, ttft_s: float) -> None:
        self._pending.pop(request_id, None)
        self._ttfts.append((self.clock(), ttft_s))

    def finished(self, request_id: str) -> None:
        self._pending.pop(request_id, None)
        self._running = max(0, self._running - 1)

    @property
    def pending_tokens(self) -> int:
        return sum(self._pending.values())

    @property
    def running(self) -> int:
        return self._running

    def recent_ttft(self) -> float:
        """Worst TTFT in the window; 0 when idle (an idle replica is not slow)."""
        cutoff = self.clock() - self.window_s
        while self._ttfts and self._ttfts[0][0] < cutoff:
            self._ttfts.popleft()
        return max((t for _, t in self._ttfts), default=0.0)

    def stats(self) -> dict[str, float]:
        return {
            PENDING_PREFILL: float(self.pending_tokens),
            RECENT_TTFT: self.recent_ttft(),
            RUNNING: float(self._running),
        }


class PrefillPressurePolicy:
    """Serve custom autoscaling policy (a class: Serve instantiates it once with `policy_kwargs`)."""

    def __init__(
        self,
        target_pending_prefill_tokens: int = 32_768,
        ttft_target_s: float = 2.0,
        idle_ongoing_per_replica: float = 4.0,
        running_requests_per_replica: float = 256.0,
    ) -> None:
        self.target_tokens = target_pending_prefill_tokens
        self.ttft_target_s = ttft_target_s
        self.idle_ongoing = idle_ongoing_per_replica
        self.running_per_replica = running_requests_per_replica

    def desired(self, n: int, pending: float, ttft: float, ongoing: float) -> float:
        """Replicas wanted now, before Serve's delays and bounds (pure, for tests)."""
        if n == 0:
            return 1.0 if ongoing > 0 or pending > 0 else 0.0
        want = max(pending / self.target_tokens, ongoing / self.running_per_replica)
        if ttft > self.ttft_target_s:
            want = max(want, n + 1)  # slow first tokens: add capacity even if the backlog looks small
        elif ttft > self.ttft_target_s / 2 or ongoing / n > self.idle_ongoing:
            want = max(want, n)  # not clearly idle: never scale down
        return want

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        metrics = ctx.aggregated_metrics or {}
        pending = sum(metrics.get(PENDING_PREFILL, {}).values())
        ttft = max(metrics.get(RECENT_TTFT, {}).values(), default=0.0)
        want = self.desired(ctx.current_num_replicas, pending, ttft, ctx.total_num_requests)
        state = {"pending_prefill_tokens": pending, "recent_ttft_s": ttft, "desired": want}
        return want, state
