"""OpenTelemetry spans across the graph: one trace per request, the Ingress's request span its root, the
Preprocessor's, Router's and Engine's spans its children, each tagged `session.id`.

The context crosses the Ray handles inside the typed messages (protocol TraceContext in AgentHints and
EngineRequest), not in Ray's own tracing. Each deployment replica builds its own `Spans` from ServeArgs when it
starts (`open_spans`): with no OTLP endpoint it is `NO_SPANS`, which imports nothing from OpenTelemetry and
costs one attribute check per call. Spans are batched and exported over OTLP/HTTP (protobuf) from the SDK's own
thread; a collector that is down costs dropped spans, never request latency.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Mapping

from agentserve.config import RequestTraceSpec
from agentserve.protocol.requests import TraceContext

SESSION_ATTRIBUTE = "session.id"
TRACES_PATH = "/v1/traces"
Attributes = Mapping[str, Any]
MAX_QUEUED = 2048  # spans waiting for export, per replica
MAX_ATTRIBUTES = 32
MAX_VALUE = 256  # characters of one attribute value
EXPORT_TIMEOUT_S = 5.0


class _NullSpan:
    """What a disabled or unparented span is: every call does nothing."""

    trace: TraceContext | None = None

    def set(self, attributes: Attributes) -> None:
        pass

    def end(self, error: str | None = None) -> None:
        pass

    def __enter__(self) -> "_NullSpan":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


NULL_SPAN = _NullSpan()


class NoSpans:
    """No endpoint configured: no spans, no OpenTelemetry import."""

    enabled = False

    def request(self, name: str, start_unix: float, session: str | None, attributes: Attributes = {}) -> _NullSpan:
        return NULL_SPAN

    def child(self, name: str, trace: TraceContext | None, attributes: Attributes = {}) -> _NullSpan:
        return NULL_SPAN

    def shutdown(self) -> None:
        pass


NO_SPANS = NoSpans()


class _Span:
    __slots__ = ("_span", "trace")

    def __init__(self, span: Any, trace: TraceContext | None) -> None:
        self._span = span
        self.trace = trace

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def end(self, error: str | None = None) -> None:
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, error))
        self._span.end()

    def __enter__(self) -> "_Span":
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        """Ends the span; an exception (a refusal, a cancellation) marks it failed, by its type and kind only (its
        message may quote the request)."""
        if exc is None:
            self.end()
        else:
            kind = getattr(exc, "kind", None)
            self.end(type(exc).__name__ + (f" ({kind})" if isinstance(kind, str) else ""))


def traceparent(span_context: Any) -> str:
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags):02x}"


class OtelSpans:
    """One deployment replica's tracer, exporting to `endpoint` (an OTLP/HTTP traces URL)."""

    enabled = True

    def __init__(self, endpoint: str, deployment: str, *, export_interval_s: float = 2.0) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanLimits, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        resource = Resource.create({
            "service.name": f"agentserve.{deployment.lower()}",
            "service.namespace": "agentserve",
            "service.instance.id": f"{socket.gethostname()}:{os.getpid()}",
            "agentserve.deployment": deployment,
        })
        # Held spans are bounded: MAX_QUEUED spans of at most MAX_ATTRIBUTES attributes of MAX_VALUE characters
        # (a client's session id is its own length); past that the SDK drops spans. At the replica's exit what is
        # queued is sent, waiting at most EXPORT_TIMEOUT_S for the collector.
        limits = SpanLimits(max_attributes=MAX_ATTRIBUTES, max_attribute_length=MAX_VALUE)
        self._provider = TracerProvider(resource=resource, span_limits=limits, shutdown_on_exit=True)
        self._provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_S), max_queue_size=MAX_QUEUED,
            schedule_delay_millis=export_interval_s * 1000, export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
        ))
        self._tracer = self._provider.get_tracer("agentserve")
        self._propagator = TraceContextTextMapPropagator()
        self._server, self._internal = SpanKind.SERVER, SpanKind.INTERNAL
        self.endpoint = endpoint

    def request(self, name: str, start_unix: float, session: str | None, attributes: Attributes = {}) -> _Span:
        """The root span of one request (started at its arrival), with the context its children join."""
        from opentelemetry.context import Context

        span = self._tracer.start_span(
            name, context=Context(), kind=self._server, start_time=int(start_unix * 1e9),
            attributes={SESSION_ATTRIBUTE: session, **attributes} if session else dict(attributes),
        )
        return _Span(span, TraceContext(traceparent=traceparent(span.get_span_context()), session=session))

    def child(self, name: str, trace: TraceContext | None, attributes: Attributes = {}) -> _Span | _NullSpan:
        """A span under the request span `trace` names (none for a request without one: work the server chose
        to do, such as a speculative prefill, is not a trace of its own)."""
        if trace is None:
            return NULL_SPAN
        parent = self._propagator.extract({"traceparent": trace.traceparent})
        attrs = {SESSION_ATTRIBUTE: trace.session, **attributes} if trace.session else dict(attributes)
        return _Span(self._tracer.start_span(name, context=parent, kind=self._internal, attributes=attrs), trace)

    def shutdown(self) -> None:
        self._provider.shutdown()


def otlp_traces_url(endpoint: str) -> str:
    """A collector's base URL (`http://collector:4318`) as its traces URL; a URL already naming a path is kept."""
    endpoint = endpoint.rstrip("/")
    scheme, _, rest = endpoint.partition("://")
    return endpoint if "/" in rest else endpoint + TRACES_PATH


def endpoint_of(spec: RequestTraceSpec, env: Mapping[str, str] = os.environ) -> str | None:
    """Where spans go: the configured endpoint, else (traces on) the standard OTLP environment variables."""
    if spec.otlp_endpoint:
        return otlp_traces_url(spec.otlp_endpoint)
    if not spec.enabled:
        return None
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + TRACES_PATH
    return None


def open_spans(spec: RequestTraceSpec, deployment: str, env: Mapping[str, str] = os.environ) -> OtelSpans | NoSpans:
    """A deployment replica's spans: exported where an endpoint is configured, else NO_SPANS."""
    endpoint = endpoint_of(spec, env)
    if endpoint is None:
        return NO_SPANS
    return OtelSpans(endpoint, deployment, export_interval_s=spec.otlp_export_interval_s)
Spans = OtelSpans | NoSpans  # what a deployment holds
