"""OpenTelemetry tracing: HTTP, DB, model-call and compression spans, only when configured.

Enabled by ``THREADKEEPER_OTEL_ENDPOINT`` (an OTLP/HTTP base URL such as
``http://collector:4318``) or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; tests inject their own span exporter instead. Without
either, ``tracer()`` hands out the API's no-op tracer and spans cost next to nothing.

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

from app.config import Settings

_active: TracerProvider | None = None


def otlp_traces_url(settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    """Where spans go: our setting (a base URL) first, then the standard OTEL variables."""
    env = os.environ if environ is None else environ
    if settings.otel_endpoint:
        base = settings.otel_endpoint.rstrip("/")
        return base if base.endswith("/v1/traces") else f"{base}/v1/traces"
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    return None


def build_tracer_provider(
    settings: Settings, exporter: SpanExporter | None = None
) -> TracerProvider | None:
    """A provider exporting to ``exporter`` (synchronously, tests) or to the OTLP endpoint."""
    if exporter is not None:
        processor: SimpleSpanProcessor | BatchSpanProcessor = SimpleSpanProcessor(exporter)
    else:
        url = otlp_traces_url(settings)
        if url is None:
            return None
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=url))
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.otel_service_name})
    )
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
    EngineTracer(provider.get_tracer("threadkeeper.db"), engine.sync_engine, usage)


def shutdown(provider: TracerProvider | None) -> None:
    """Flush pending spans and stop exporting; the no-op tracer takes over."""
    if provider is None:
        return
    if _active is provider:
        activate(None)
    provider.shutdown()
