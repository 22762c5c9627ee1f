"""OpenTelemetry request spans (traces/otel.py): one trace per request across deployments, nothing without an
endpoint."""

from __future__ import annotations

import subprocess
import sys

from agentserve.config import RequestTraceSpec
from agentserve.traces.otel import NO_SPANS, OtelSpans, endpoint_of, open_spans, otlp_traces_url
from tests.support.otlp_receiver import OtlpReceiver


def test_no_endpoint_means_no_tracer_set_up():
    """Ray imports the OpenTelemetry SDK itself; what must not exist without an endpoint is ours: no exporter
    loaded, no span processor thread."""
    code = (
        "import sys, threading\n"
        "from agentserve.config import RequestTraceSpec\n"
        "from agentserve.traces.otel import open_spans, NO_SPANS\n"
        "import agentserve.ingress.lifecycle, agentserve.ingress.observers.request_traces\n"
        "assert open_spans(RequestTraceSpec(enabled=True), 'Ingress', {}) is NO_SPANS\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.exporter')),\n"
        "      [t.name for t in threading.enumerate() if 'Otel' in t.name])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []"


def test_endpoint_from_config_or_from_the_standard_variables_when_traces_are_on():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert endpoint_of(RequestTraceSpec(), env) is None  # off: an environment's collector is not a switch
    assert endpoint_of(RequestTraceSpec(enabled=True), env) == "http://collector:4318/v1/traces"
    traces_env = {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c2:4318/custom"}
    assert endpoint_of(RequestTraceSpec(enabled=True), traces_env) == "http://c2:4318/custom"
    assert endpoint_of(RequestTraceSpec(otlp_endpoint="http://x:4318"), {}) == "http://x:4318/v1/traces"
    assert otlp_traces_url("http://x:4318/v1/traces") == "http://x:4318/v1/traces"


def test_children_in_other_deployments_join_the_request_trace_with_the_session():
    with OtlpReceiver() as rx:
        ingress = OtelSpans(rx.endpoint, "Ingress", export_interval_s=0.05)
        engine = OtelSpans(rx.endpoint, "Engine", export_interval_s=0.05)
        root = ingress.request("ingress.request", 1_700_000_000.0, "sess-1", {"agentserve.request_id": "r1"})
        assert root.trace is not None and root.trace.session == "sess-1"
        with engine.child("engine.generate", root.trace) as child:
            child.set({"gen_ai.usage.input_tokens": 12, "skipped": None})
        assert engine.child("engine.generate", None) is not None  # no trace: a null span, nothing exported
        root.end()
        ingress.shutdown()
        engine.shutdown()
        spans = rx.wait_for(lambda s: len(s) >= 2)
    assert len(spans) == 2
    by_name = {s.name: s for s in spans}
    r, c = by_name["ingress.request"], by_name["engine.generate"]
    assert r.trace_id == c.trace_id and c.parent_span_id == r.span_id and r.parent_span_id == ""
    assert r.service == "agentserve.ingress" and c.service == "agentserve.engine"
    assert r.attributes["session.id"] == c.attributes["session.id"] == "sess-1"
    assert c.attributes["gen_ai.usage.input_tokens"] == 12 and "skipped" not in c.attributes


def test_an_exception_in_a_child_marks_it_failed_and_still_ends_it():
    with OtlpReceiver() as rx:
        spans = OtelSpans(rx.endpoint, "Router", export_interval_s=0.05)
        root = spans.request("ingress.request", 1_700_000_000.0, None)
        try:
            with spans.child("router.route", root.trace):
                raise RuntimeError("saturated by the prompt 'SECRET TEXT'")
        except RuntimeError:
            pass
        root.end()
        spans.shutdown()
        got = rx.wait_for(lambda s: len(s) >= 2)
    assert {s.name: s.error for s in got} == {"ingress.request": None, "router.route": "RuntimeError"}
    assert all("session.id" not in s.attributes for s in got)  # no session named: none invented


def test_disabled_spans_are_shared_no_ops():
    assert open_spans(RequestTraceSpec(), "Engine", {}) is NO_SPANS
    span = NO_SPANS.child("x", None)
    with span:
        span.set({"a": 1})
    assert NO_SPANS.request("x", 0.0, "s").trace is None
