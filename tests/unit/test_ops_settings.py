"""Rate-limit buckets, unknown and deprecated settings, and where traces go (OTEL_* variables)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.testing import capture_logs

from app.api.rate_limit import RateLimiter
from app.config import TelemetrySettings, load_settings, unknown_settings
from app.logging import warn_unknown_settings
from app.telemetry import build_exporter, build_tracer_provider


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_burst_then_refills_at_the_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=2.0, burst=3, clock=clock)
    assert [limiter.retry_after("alice") for _ in range(3)] == [0, 0, 0]
    assert limiter.retry_after("alice") == 1  # 0.5 s to the next token, rounded up
    assert limiter.retry_after("bob") == 0  # buckets are per principal
    clock.now += 0.5
    assert limiter.retry_after("alice") == 0
    assert limiter.retry_after("alice") == 1
    clock.now += 60  # refill is capped at the burst
    assert [limiter.retry_after("alice") for _ in range(4)] == [0, 0, 0, 1]


def test_slow_rates_ask_for_longer_waits_and_zero_disables() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=0.1, burst=1, clock=clock)
    assert limiter.retry_after("alice") == 0
    assert limiter.retry_after("alice") == 10
    off = RateLimiter(rate=0, burst=1, clock=clock)
    assert all(off.retry_after("alice") == 0 for _ in range(1000))


def test_rate_limit_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="RATE_LIMIT"):
        load_settings({}, rate_limit_per_second=-1)
    with pytest.raises(ValueError, match="RATE_LIMIT"):
        load_settings({}, rate_limit_burst=0)


def test_unknown_settings_names_only_unread_threadkeeper_variables() -> None:
    env = {
        "THREADKEEPER_SUMMARY_THRESHOLD": "1",
        "THREADKEEPER_SUMARY_THRESHOLD": "1",
        "THREADKEEPER_ZZZ": "1",
        "DATABASE_URL": "x",
        "OTHER": "1",
    }
    assert unknown_settings(env) == ["THREADKEEPER_SUMARY_THRESHOLD", "THREADKEEPER_ZZZ"]
    assert unknown_settings({"THREADKEEPER_LOG_JSON": "true"}) == []


def _endpoint(settings: TelemetrySettings) -> str | None:
    exporter = build_exporter(settings)
    # The SDK exporter keeps the URL it posts to here (it reads the OTEL_* variables itself).
    return None if exporter is None else exporter._endpoint  # type: ignore[attr-defined]


def test_otlp_endpoint_resolution_and_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    plain = load_settings({}).telemetry
    assert _endpoint(plain) is None
    assert build_tracer_provider(plain) is None
    # The deprecated spelling of OTEL_EXPORTER_OTLP_ENDPOINT (a base URL) still works.
    ours = load_settings({}, otel_endpoint="http://c:4318/").telemetry
    assert _endpoint(ours) == "http://c:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://o:4318")
    assert _endpoint(plain) == "http://o:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom")
    assert _endpoint(plain) == "http://t:4318/custom"


def _service_name(settings: TelemetrySettings, environ: dict[str, str]) -> object:
    provider = build_tracer_provider(settings, InMemorySpanExporter(), environ)
    assert provider is not None
    return provider.resource.attributes["service.name"]


def test_service_name_from_otel_service_name_else_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    plain = load_settings({}).telemetry
    assert _service_name(plain, {}) == "threadkeeper"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tk-eu")  # the SDK reads it
    assert _service_name(plain, {"OTEL_SERVICE_NAME": "tk-eu"}) == "tk-eu"
    legacy = load_settings({"THREADKEEPER_OTEL_SERVICE_NAME": "old-name"}).telemetry
    assert _service_name(legacy, {"OTEL_SERVICE_NAME": "tk-eu"}) == "old-name"


def test_deprecated_variables_work_and_are_named_with_their_replacement() -> None:
    env = {
        "THREADKEEPER_S3_REGION": "eu-west-3",
        "THREADKEEPER_OTEL_ENDPOINT": "http://c:4318",
        "THREADKEEPER_SUMMARY_THRESHOLD": "5000",
    }
    settings = load_settings(env)
    assert settings.workdir.s3_region == "eu-west-3"
    assert settings.telemetry.otel_endpoint == "http://c:4318"
    assert unknown_settings(env) == []  # still read: not reported as a typo
    with capture_logs() as logs:
        warn_unknown_settings(env)
    deprecated = {e["name"]: e["use"] for e in logs if e["event"] == "deprecated_setting"}
    assert deprecated == {
        "THREADKEEPER_S3_REGION": "AWS_REGION",
        "THREADKEEPER_OTEL_ENDPOINT": "OTEL_EXPORTER_OTLP_ENDPOINT",
    }
    assert all(e["log_level"] == "warning" for e in logs)
    with capture_logs() as quiet:
        warn_unknown_settings({"THREADKEEPER_SUMMARY_THRESHOLD": "5000"})
    assert quiet == []


def test_removed_kb_default_is_reported_as_unknown() -> None:
    """``THREADKEEPER_KB_DEFAULT`` was read by nothing; it is gone, and a leftover is named."""
    assert unknown_settings({"THREADKEEPER_KB_DEFAULT": "default"}) == ["THREADKEEPER_KB_DEFAULT"]
