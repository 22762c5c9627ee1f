"""Engine autoscaling policy and tracker, Ray metrics mirroring, stream observations (no Ray cluster)."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agentserve import metrics
from agentserve.protocol.events import ToolCallEnd, ToolCallError
from agentserve.serve.autoscaling import PENDING_PREFILL, RECENT_TTFT, PrefillPressurePolicy, PrefillTracker
from agentserve.ingress.observers.telemetry import StreamObserver
from agentserve.serve.ray_metrics import RegistryMirror


def test_tracker_counts_pending_prefill_until_first_token():
    now = [0.0]
    t = PrefillTracker(window_s=10, clock=lambda: now[0])
    t.admitted("a", 5000)
    t.admitted("b", 300)
    assert t.pending_tokens == 5300 and t.running == 2
    t.first_token("a", 1.5)
    assert t.pending_tokens == 300 and t.recent_ttft() == 1.5
    t.finished("a")
    t.finished("b")  # aborted before its first token
    assert t.pending_tokens == 0 and t.running == 0
    now[0] = 11.0
    assert t.recent_ttft() == 0.0  # idle replicas do not look slow


def _ctx(n, pending, ttft, ongoing):
    return SimpleNamespace(
        current_num_replicas=n,
        total_num_requests=ongoing,
        aggregated_metrics={
            PENDING_PREFILL: {f"r{i}": pending / n for i in range(n)},
            RECENT_TTFT: {f"r{i}": ttft for i in range(n)},
        },
    )


def test_policy_scales_on_prefill_backlog_not_request_count():
    p = PrefillPressurePolicy(target_pending_prefill_tokens=10_000, ttft_target_s=2.0)
    # Few requests, huge cold prompts: scale out.
    want, state = p(_ctx(2, pending=60_000, ttft=1.5, ongoing=3))
    assert want == 6 and state["pending_prefill_tokens"] == 60_000
    # 100 warm streams (prefix cached, little prefill), fast TTFT: hold, where Serve's default policy
    # (target_ongoing_requests=2) would ask for 50 replicas.
    want, _ = p(_ctx(2, pending=500, ttft=0.1, ongoing=100))
    assert want == 2


def test_policy_adds_a_replica_when_ttft_is_over_target_and_holds_while_close():
    p = PrefillPressurePolicy(target_pending_prefill_tokens=10_000, ttft_target_s=2.0)
    assert p(_ctx(3, pending=0, ttft=3.0, ongoing=2))[0] == 4
    assert p(_ctx(3, pending=0, ttft=1.2, ongoing=2))[0] == 3  # above half the target: no scale-down
    assert p(_ctx(3, pending=0, ttft=0.2, ongoing=30))[0] == 3  # busy decoding: no scale-down
    assert p(_ctx(3, pending=0, ttft=0.2, ongoing=1))[0] < 3  # idle: may scale down (after Serve's delay)


class _Fake:
    def __init__(self, kind, name, keys):
        self.kind, self.name, self.keys, self.calls = kind, name, keys, []

    def inc(self, value, tags):
        self.calls.append(("inc", value, tags))

    def set(self, value, tags):
        self.calls.append(("set", value, tags))


class _Sink:
    def __init__(self):
        self.made = {}

    def counter(self, name, doc, keys):
        return self.made.setdefault(name, _Fake("counter", name, keys))

    def gauge(self, name, doc, keys):
        return self.made.setdefault(name, _Fake("gauge", name, keys))


def test_mirror_exports_counter_deltas_gauges_and_histogram_series():
    reg = CollectorRegistry()
    c = Counter("x_requests_total", "d", ["api"], registry=reg)
    g = Gauge("x_pending", "d", registry=reg)
    h = Histogram("x_ttft_seconds", "d", buckets=(0.1, 1), registry=reg)
    sink = _Sink()
    mirror = RegistryMirror(reg, sink)
    c.labels("chat").inc(3)
    g.set(7)
    h.observe(0.5)
    mirror.export_once()
    c.labels("chat").inc(2)
    mirror.export_once()
    mirror.export_once()  # nothing new: no counter increment
    assert sink.made["x_requests_total"].calls == [("inc", 3.0, {"api": "chat"}), ("inc", 2.0, {"api": "chat"})]
    assert sink.made["x_pending"].calls[-1] == ("set", 7.0, {})
    buckets = sink.made["x_ttft_seconds_bucket"]
    assert buckets.kind == "gauge" and buckets.keys == ("le",)
    assert {(v, t["le"]) for _, v, t in buckets.calls[:3]} == {(0.0, "0.1"), (1.0, "1.0"), (1.0, "+Inf")}
    assert sink.made["x_ttft_seconds_count"].calls[-1][1] == 1.0
    assert not any(n.endswith("_created") for n in sink.made)


def test_stream_observer_counts_parser_errors_and_tool_lead_time():
    now = [10.0]
    obs = StreamObserver("m-test", clock=lambda: now[0])
    errors = metrics.PARSER_ERRORS.labels("m-test", "error")
    before = errors._value.get()
    obs.events([ToolCallError(index=0, message="bad json", raw="<tool_call>{")])
    assert errors._value.get() == before + 1
    obs.events([ToolCallEnd(index=1, arguments="{}")])
    now[0] = 12.5
    lead = metrics.TOOL_DISPATCH_LEAD.labels("m-test")
    n = lead._sum.get()
    obs.finished()
    assert lead._sum.get() - n == 2.5
