"""OpenTelemetry tracing: HTTP, DB, model-call and compression spans, only when configured.

Enabled by the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (an OTLP/HTTP base URL such as
``http://collector:4318``) or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, which the SDK's exporter
reads itself (with ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``... likewise); the
deprecated ``THREADKEEPER_OTEL_ENDPOINT`` still works for one release. Tests inject their own span
exporter instead. Without any, ``tracer()`` hands out the API's no-op tracer and spans cost next
to nothing.

The provider is ours, not the process-global one (which can be set only once): the app and the
worker activate theirs, and our own spans ask ``tracer()`` for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config import TelemetrySettings
from app.db.driver import trace_statements

_active: TracerProvider | None = None


#: ``service.name`` unless ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``) names one.
DEFAULT_SERVICE_NAME = "threadkeeper"
#: Either turns tracing on; the exporter reads them itself.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def build_exporter(
    settings: TelemetrySettings, environ: Mapping[str, str] | None = None
) -> SpanExporter | None:
    """The OTLP/HTTP exporter when an endpoint is configured, else ``None`` (no tracing)."""
    env = os.environ if environ is None else environ
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if settings.otel_endpoint:  # deprecated spelling of OTEL_EXPORTER_OTLP_ENDPOINT
        base = settings.otel_endpoint.rstrip("/")
        return OTLPSpanExporter(
            endpoint=base if base.endswith("/v1/traces") else f"{base}/v1/traces"
        )
    if any(env.get(name) for name in ENDPOINT_VARIABLES):
        return OTLPSpanExporter()
    return None


def _resource(settings: TelemetrySettings, env: Mapping[str, str]) -> Resource:
    # Attributes given here win over the OTEL_* variables: name a service only when they don't.
    if settings.otel_service_name:  # deprecated spelling of OTEL_SERVICE_NAME
        return Resource.create({"service.name": settings.otel_service_name})
    if env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        return Resource.create()
    return Resource.create({"service.name": DEFAULT_SERVICE_NAME})


def build_tracer_provider(
    settings: TelemetrySettings,
    exporter: SpanExporter | None = None,
    environ: Mapping[str, str] | None = None,
) -> TracerProvider | None:
    """A provider exporting to ``exporter`` (synchronously, tests) or to the OTLP endpoint."""
    env = os.environ if environ is None else environ
    if exporter is not None:
        processor: SimpleSpanProcessor | BatchSpanProcessor = SimpleSpanProcessor(exporter)
    else:
        configured = build_exporter(settings, env)
        if configured is None:
            return None
        processor = BatchSpanProcessor(configured)
    provider = TracerProvider(resource=_resource(settings, env))
    provider.add_span_processor(processor)
    return provider


def activate(provider: TracerProvider | None) -> None:
    global _active
    _active = provider


def tracer() -> trace.Tracer:
    """Our spans' tracer: the active provider's, else the (by default no-op) global one."""
    provider: trace.TracerProvider = _active or trace.get_tracer_provider()
    return provider.get_tracer("threadkeeper")


def instrument_engine(engine: AsyncEngine, provider: TracerProvider) -> None:
    """One span per SQL statement on this engine (not a global monkeypatch of SQLAlchemy)."""
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer

    usage = (
        otel_metrics.NoOpMeterProvider()
        .get_meter("threadkeeper")
        .create_up_down_counter("db.client.connections.usage")
    )
    db_tracer = provider.get_tracer("threadkeeper.db")
    EngineTracer(db_tracer, engine.sync_engine, usage)
    trace_statements(engine, db_tracer)  # the hot path's statements on the driver itself


def shutdown(provider: TracerProvider | None) -> None:
    """Flush pending spans and stop exporting; the no-op tracer takes over."""
    if provider is None:
        return
    if _active is provider:
        activate(None)
    provider.shutdown()
