"""Mirror agentserve's prometheus_client registry into Ray metrics, in every replica process.

Why: `agentserve.metrics` lives in whichever process records it (ingress, router, engine replicas), and a
process-local /metrics only shows one ingress replica. Ray's metrics agent on each node exports every
worker's `ray.util.metrics` on the node's metrics port (8080 on KubeRay pods), which is what Prometheus
scrapes. Mirroring the registry (instead of redefining every metric for Ray) keeps `agentserve.metrics`
the single definition that all engineers add to, and gives each series Serve's `deployment`/`replica`/
`application` tags for free (through `ray.serve.metrics`).

Names are exported unchanged; Ray's exporter prefixes `ray_` (e.g. `ray_agentserve_requests_total`).
Counters stay counters (incremented by the delta since the last export). Histograms are exported as
gauges of their cumulative `_bucket{le}`, `_sum` and `_count` series, so `histogram_quantile` and `rate`
work on them as on native histograms.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Protocol

from prometheus_client import CollectorRegistry

logger = logging.getLogger("ray.serve")

# Ray's metrics agent reports every 10 s (RAY_metrics_report_interval_ms): mirroring more often only wakes every
# replica process for values nobody collects in between.
EXPORT_INTERVAL_S = 10.0


class _Sink(Protocol):
    def counter(self, name: str, doc: str, keys: tuple[str, ...]) -> Any: ...
    def gauge(self, name: str, doc: str, keys: tuple[str, ...]) -> Any: ...


class RaySink:
    """Creates ray.serve.metrics objects (Serve tags added inside a replica, plain Ray metrics outside)."""

    def counter(self, name: str, doc: str, keys: tuple[str, ...]) -> Any:
        from ray.serve import metrics as m

        return m.Counter(name, description=doc, tag_keys=keys)

    def gauge(self, name: str, doc: str, keys: tuple[str, ...]) -> Any:
        from ray.serve import metrics as m

        return m.Gauge(name, description=doc, tag_keys=keys)


class RegistryMirror:
    def __init__(self, registry: CollectorRegistry, sink: _Sink | None = None) -> None:
        self._registry = registry
        self._sink = sink or RaySink()
        self._metrics: dict[str, Any] = {}
        self._last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def _get(self, kind: str, name: str, doc: str, keys: tuple[str, ...]) -> Any:
        metric = self._metrics.get(name)
        if metric is None:
            make: Callable[..., Any] = self._sink.counter if kind == "counter" else self._sink.gauge
            metric = self._metrics[name] = make(name, doc or name, keys)
        return metric

    def export_once(self) -> int:
        """Push the registry's current values; returns how many series were written."""
        written = 0
        for family in self._registry.collect():
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                keys = tuple(sorted(s.labels))
                tags = {k: str(v) for k, v in s.labels.items()}
                if family.type == "counter":
                    series = (s.name, tuple(sorted(tags.items())))
                    delta = s.value - self._last.get(series, 0.0)
                    self._last[series] = s.value
                    if delta > 0:
                        self._get("counter", s.name, family.documentation, keys).inc(delta, tags=tags)
                        written += 1
                elif family.type in ("gauge", "histogram"):
                    self._get("gauge", s.name, family.documentation, keys).set(s.value, tags=tags)
                    written += 1
        return written

    def run_forever(self, interval_s: float = EXPORT_INTERVAL_S) -> None:
        while True:
            time.sleep(interval_s)
            try:
                self.export_once()
            except Exception:  # metrics must never take a replica down
                logger.warning("exporting agentserve metrics to Ray failed", exc_info=True)


_STARTED = False
_LOCK = threading.Lock()


def start_export(registry: CollectorRegistry | None = None, interval_s: float = EXPORT_INTERVAL_S) -> bool:
    """Start mirroring on a daemon thread, once per process (each deployment's __init__ calls this)."""
    global _STARTED
    from agentserve import metrics

    with _LOCK:
        if _STARTED:
            return False
        _STARTED = True
    mirror = RegistryMirror(registry or metrics.REGISTRY)
    threading.Thread(target=mirror.run_forever, args=(interval_s,), name="agentserve-metrics", daemon=True).start()
    return True
