"""Rate-limit buckets, unknown-setting detection and the OTLP endpoint resolution."""

from __future__ import annotations

import pytest

from app.api.rate_limit import RateLimiter
from app.config import load_settings, unknown_settings
from app.telemetry import build_tracer_provider, otlp_traces_url


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


def test_otlp_endpoint_resolution_and_off_by_default() -> None:
    ours = load_settings({}, otel_endpoint="http://c:4318/")
    assert otlp_traces_url(ours, {}) == "http://c:4318/v1/traces"
    plain = load_settings({})
    assert otlp_traces_url(plain, {}) is None
    assert build_tracer_provider(plain) is None or otlp_traces_url(plain) is not None
    assert otlp_traces_url(plain, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://o:4318"}) == (
        "http://o:4318/v1/traces"
    )
    assert (
        otlp_traces_url(
            plain,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://o:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/custom",
            },
        )
        == "http://t:4318/custom"
    )
