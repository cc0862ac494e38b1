"""Prometheus metrics: process counters recorded where things happen, DB gauges read at scrape.

Counters live in prometheus-client's default registry, so each process (API, standalone worker)
counts what it did itself. Gauges that describe shared state (active runs by status, queue
depth) are read from PostgreSQL when ``/metrics`` is scraped, so every process reports the same
truth; each is served by a partial index, so a scrape never reads the history of finished runs.
Labels never carry ids, principals or text: cardinality stays fixed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

#: The text format ``generate_latest`` writes (0.0.4), with exactly one charset parameter.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

HTTP_REQUESTS = Counter(
    "threadkeeper_http_requests",
    "HTTP requests answered, by route template (`unmatched` for unknown paths) and status.",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "threadkeeper_http_request_duration_seconds",
    "Time from request start to the end of the response body, by route template.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LEASE_RECOVERIES = Counter(
    "threadkeeper_lease_recoveries",
    "Runs failed by this process because their worker's lease expired.",
)
COMPRESSIONS = Counter(
    "threadkeeper_compressions",
    "Context compressions applied: trigger auto (threshold, overflow) or manual; kind offload "
    "(tool results moved to the Workdir only) or summary.",
    ["trigger", "reason", "kind"],
)
TOKENS_SAVED = Counter(
    "threadkeeper_compression_tokens_saved",
    "Model-request tokens removed by compressions (before - after).",
    ["trigger"],
)
OFFLOADED_RESULTS = Counter(
    "threadkeeper_offloaded_tool_results",
    "Tool results written to the Workdir and replaced by a preview.",
)
SUMMARIZER_CALLS = Counter(
    "threadkeeper_summarizer_calls",
    "Summarizer invocations by outcome (ok, error: failed, timed out or empty).",
    ["outcome"],
)
RUNS_FINISHED = Counter(
    "threadkeeper_runs_finished",
    "Runs this process ended, by final status (completed, failed, cancelled).",
    ["status"],
)
for _status in ("completed", "failed", "cancelled"):
    RUNS_FINISHED.labels(_status)  # every series exists from the start, at 0
PROVIDER_RETRIES = Counter(
    "threadkeeper_provider_retries",
    "Model calls tried again after a transient provider failure, by kind (rate_limited, "
    "server_error, connection).",
    ["kind"],
)
PROVIDER_GIVE_UPS = Counter(
    "threadkeeper_provider_give_ups",
    "Model calls given up after transient failures (per-call or per-run bound reached), by kind.",
    ["kind"],
)
for _kind in ("rate_limited", "server_error", "connection"):
    PROVIDER_RETRIES.labels(_kind)
    PROVIDER_GIVE_UPS.labels(_kind)
PROVIDER_RETRY_WAIT = Histogram(
    "threadkeeper_provider_retry_wait_seconds",
    "Waits before a model call's next attempt (Retry-After, or backoff with jitter).",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 60),
)
MODEL_SLOT_WAIT = Histogram(
    "threadkeeper_model_slot_wait_seconds",
    "Waits for a free slot of a model's max_concurrency before calling it.",
    buckets=(0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30),
)
WORKER_RUNS = Gauge(
    "threadkeeper_worker_runs",
    "Runs this process's worker holds now (claimed, not finished).",
)
LOOP_LAG = Gauge(
    "threadkeeper_worker_loop_lag_seconds",
    "How late this worker's event loop runs (smoothed); over THREADKEEPER_WORKER_MAX_LOOP_LAG_MS "
    "the worker claims no new run.",
)
ADMISSION_HELD = Counter(
    "threadkeeper_worker_admission_held",
    "Times this worker stopped claiming runs because its event loop lagged.",
)
RATE_LIMITED = Counter(
    "threadkeeper_rate_limited",
    "Requests refused with 429 rate_limited.",
)
AUTH_REFUSALS = Counter(
    "threadkeeper_auth_refusals",
    "Bearer credentials refused with 401 invalid_token, by reason (expired, wrong_audience, "
    "bad_signature, unknown_key, ...; unknown_api_key for a string that is no key and no JWT).",
    ["reason"],
)
JWKS_FETCHES = Counter(
    "threadkeeper_jwks_fetches",
    "Fetches of the identity provider's signing keys (discovery + JWKS), by outcome (ok, error).",
    ["outcome"],
)
for _outcome in ("ok", "error"):
    JWKS_FETCHES.labels(_outcome)
GC_SECONDS = Counter(
    "threadkeeper_gc_seconds",
    "Time this serving process spent in the garbage collector (its event loop stood still), by "
    "generation (0, 1, 2; app/gc_policy.py).",
    ["generation"],
)


def record_run_finished(status: str) -> None:
    """A run reached a final status (called where that status is written: the run state
    machine's transitions, app/repositories/run_leases.py). ``interrupted`` is not final and not counted."""
    if status in ("completed", "failed", "cancelled"):
        RUNS_FINISHED.labels(status).inc()


def record_compression(
    *, reason: str, summarized: bool, offloaded: int, before_tokens: int, after_tokens: int
) -> None:
    """One applied compression (automatic ``threshold``/``overflow`` or ``manual``)."""
    trigger = "manual" if reason == "manual" else "auto"
    COMPRESSIONS.labels(trigger, reason, "summary" if summarized else "offload").inc()
    TOKENS_SAVED.labels(trigger).inc(max(0, before_tokens - after_tokens))
    OFFLOADED_RESULTS.inc(offloaded)


class _Snapshot(Collector):
    """Gauges of shared state, read from the database just before this scrape."""

    def __init__(self, runs_by_status: Mapping[str, int], queued_requests: int) -> None:
        self.runs_by_status = runs_by_status
        self.queued_requests = queued_requests

    def collect(self) -> Iterable[Metric]:
        runs = GaugeMetricFamily(
            "threadkeeper_runs",
            "Runs currently running or interrupted (database).",
            labels=["status"],
        )
        for status, count in sorted(self.runs_by_status.items()):
            runs.add_metric([status], count)
        yield runs
        yield GaugeMetricFamily(
            "threadkeeper_queue_depth",
            "Queued run requests not yet dispatched, all threads (database).",
            value=self.queued_requests,
        )


def render(runs_by_status: Mapping[str, int], queued_requests: int) -> bytes:
    """The exposition text: this process's counters followed by the scrape-time gauges."""
    snapshot = CollectorRegistry(auto_describe=False)
    snapshot.register(_Snapshot(runs_by_status, queued_requests))
    return generate_latest(REGISTRY) + generate_latest(snapshot)
