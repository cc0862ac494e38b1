"""Operations: Prometheus /metrics, OpenTelemetry spans, request ids, rate limit, Retry-After."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.db.urls import libpq_url
from tests.support.api import new_thread, run_turns, scrape, seed_kb, value
from tests.support.app_harness import AUTH, OTHER_AUTH, AppFactory
from tests.support.corpus import BIG

pytestmark = pytest.mark.integration


async def test_metrics_after_real_runs_and_a_manual_compression(app_factory: AppFactory) -> None:
    async with app_factory(**BIG) as h:
        before = await scrape(h)
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the lease heartbeat?"])
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 200, resp.text
        out = resp.json()
        assert out["summarized"] is True
        after = await scrape(h)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    route = "/v1/threads/{thread_id}/messages"
    assert delta("threadkeeper_http_requests_total", method="POST", route=route, status="202") == 2
    assert (
        delta("threadkeeper_http_request_duration_seconds_count", method="POST", route=route) == 2
    )
    # Active runs by status come from the database (tables are truncated per test); finished
    # ones are counted by the process that ended them.
    assert delta("threadkeeper_runs_finished_total", status="completed") == 2
    assert value(after, "threadkeeper_runs", status="running") == 0
    assert value(after, "threadkeeper_runs", status="interrupted") == 0
    assert {dict(ls)["status"] for (n, ls) in after if n == "threadkeeper_runs"} == {
        "running",
        "interrupted",
    }
    assert value(after, "threadkeeper_queue_depth") == 0
    assert delta("threadkeeper_compressions_total", trigger="manual", kind="summary") == 1
    assert delta("threadkeeper_compressions_total", trigger="auto") == 0
    assert delta("threadkeeper_compression_tokens_saved_total", trigger="manual") == (
        out["before_tokens"] - out["after_tokens"]
    )
    assert delta("threadkeeper_offloaded_tool_results_total") == out["offloaded"]
    assert delta("threadkeeper_summarizer_calls_total", outcome="ok") == 1
    # Labels are templates, never ids.
    assert not any(tid in dict(ls).get("route", "") for (_, ls) in after)


async def test_metrics_count_automatic_compression(app_factory: AppFactory) -> None:
    async with app_factory(
        summary_threshold=3000, tool_result_preview_tokens=300, summary_keep_recent_tokens=400
    ) as h:
        before = await scrape(h)
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(
            h, tid, ["how does a lease expire?", "and the heartbeat?", "when is a lease renewed?"]
        )
        after = await scrape(h)
    name = "threadkeeper_compressions_total"
    assert value(after, name, trigger="auto") - value(before, name, trigger="auto") >= 1
    assert value(after, name, trigger="manual") == value(before, name, trigger="manual")
    saved = "threadkeeper_compression_tokens_saved_total"
    assert value(after, saved, trigger="auto") > value(before, saved, trigger="auto")


async def test_metrics_queue_depth_and_lease_recoveries(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        for text in ("one", "two"):
            posted = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH
            )
            assert posted.status_code == 202
        before = await scrape(h)
        assert value(before, "threadkeeper_queue_depth") == 2
        claimed = await h.container.worker.claim_next()
        assert claimed is not None
        with psycopg.connect(libpq_url(h.container.database_url), autocommit=True) as conn:
            conn.execute(
                "UPDATE agent_runs SET lease_expires_at = now() - interval '1 second' "
                "WHERE id = %s",
                (claimed.run_id,),
            )
        assert await h.container.worker.recover_expired() == 1
        after = await scrape(h)
    assert value(after, "threadkeeper_queue_depth") == 1
    assert value(after, "threadkeeper_runs", status="running") == 0
    finished = "threadkeeper_runs_finished_total"
    assert value(after, finished, status="failed") - value(before, finished, status="failed") == 1
    recoveries = "threadkeeper_lease_recoveries_total"
    assert value(after, recoveries) - value(before, recoveries) == 1


async def test_metrics_can_be_turned_off(app_factory: AppFactory) -> None:
    async with app_factory(metrics_enabled=False) as h:
        assert (await h.client.get("/metrics")).status_code == 404


async def test_request_id_on_every_response_including_404_405_and_errors(
    app_factory: AppFactory,
) -> None:
    async with app_factory() as h:
        responses = [
            await h.client.get("/no/such/route"),
            await h.client.delete("/health"),
            await h.client.get("/v1/threads"),  # 401
            await h.client.post("/v1/threads", content=b"{", headers=AUTH),  # 400
            await h.client.get("/health"),
        ]
        assert [r.status_code for r in responses] == [404, 405, 401, 400, 200]
        ids = [r.headers.get("x-request-id") for r in responses]
        assert all(ids) and len(set(ids)) == len(ids), ids
        echoed = await h.client.get("/nope", headers={"X-Request-ID": "abc-123"})
        assert echoed.status_code == 404
        assert echoed.headers.get_list("x-request-id") == ["abc-123"]
        assert (await h.client.get("/nope", headers={"X-Request-ID": "a b\n"})).headers[
            "x-request-id"
        ] != "a b\n"


async def test_rate_limit_per_principal_with_retry_after(app_factory: AppFactory) -> None:
    async with app_factory(rate_limit_per_second=0.2, rate_limit_burst=3) as h:
        statuses = [(await h.client.get("/v1/threads", headers=AUTH)).status_code for _ in range(3)]
        assert statuses == [200, 200, 200]
        limited = await h.client.get("/v1/threads", headers=AUTH)
        assert limited.status_code == 429
        assert limited.json()["error"] == "rate_limited"
        assert 1 <= int(limited.headers["retry-after"]) <= 5
        assert limited.headers["x-request-id"]
        # Another principal has its own bucket; unauthenticated calls are refused before counting.
        assert (await h.client.get("/v1/threads", headers=OTHER_AUTH)).status_code == 200
        assert (await h.client.get("/v1/threads")).status_code == 401
        # Operations endpoints are not rate limited.
        assert (await h.client.get("/health")).status_code == 200
        metrics = await scrape(h)
        assert value(metrics, "threadkeeper_rate_limited_total") >= 1


async def test_thread_busy_carries_retry_after(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
        busy = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert busy.status_code == 409 and busy.json()["error"] == "thread_busy"
        assert busy.headers["retry-after"] == "1"


async def test_openapi_documents_429_and_retry_after(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        doc = (await h.client.get("/schema/openapi.json")).json()
    secured = 0
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            responses = op["responses"]
            if op.get("security"):
                secured += 1
                assert "Retry-After" in responses["429"]["headers"], (method, path)
                assert "rate_limited" in responses["429"]["description"]
            if "409" in responses:
                assert "Retry-After" in responses["409"]["headers"], (method, path)
    assert secured >= 10
    assert "/metrics" not in doc["paths"]


async def test_spans_for_http_db_model_and_compression(app_factory: AppFactory) -> None:
    exporter = InMemorySpanExporter()
    async with app_factory(span_exporter=exporter, **BIG) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the lease heartbeat?"])
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 200, resp.text
        missing = await h.client.get("/no/such/route")
        assert missing.status_code == 404
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    server = [s for s in spans if s.kind.name == "SERVER"]
    assert any(
        s.name == "POST /v1/threads/{thread_id}/context/compress"
        and s.attributes is not None
        and s.attributes.get("http.route") == "/v1/threads/{thread_id}/context/compress"
        for s in server
    ), [s.name for s in server]
    unmatched = [
        s
        for s in server
        if 404
        in {
            (s.attributes or {}).get("http.status_code"),
            (s.attributes or {}).get("http.response.status_code"),
        }
    ]
    assert [s.name for s in unmatched] == ["GET"]  # no raw path in span names
    db = [s for s in spans if (s.attributes or {}).get("db.system") == "postgresql"]
    assert db, names
    model_calls = [s for s in spans if s.name == "model.call"]
    assert len(model_calls) >= 4  # two turns, each a tool call round and an answer
    compress = [s for s in spans if s.name == "context.compress"]
    manual = [s for s in compress if (s.attributes or {}).get("threadkeeper.reason") == "manual"]
    assert len(manual) == 1
    assert (manual[0].attributes or {}).get("threadkeeper.summarized") is True
    summarizer = [s for s in spans if s.name == "summarizer.call"]
    assert summarizer and summarizer[0].parent is not None
    assert summarizer[0].parent.span_id == manual[0].context.span_id
    # The compression span is a child of the HTTP request that asked for it.
    assert manual[0].parent is not None
    assert manual[0].context.trace_id in {s.context.trace_id for s in server}


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.received.append((self.path, body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def otlp_collector() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """A real OTLP/HTTP endpoint on loopback that keeps what it receives."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.received  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("configured_by", ["OTEL_EXPORTER_OTLP_ENDPOINT", "deprecated setting"])
async def test_otlp_endpoint_setting_exports_spans_over_http(
    app_factory: AppFactory,
    otlp_collector: tuple[str, list[tuple[str, bytes]]],
    configured_by: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, received = otlp_collector
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    overrides: dict[str, str] = {}
    if configured_by == "OTEL_EXPORTER_OTLP_ENDPOINT":
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)  # read by the SDK's exporter
    else:
        overrides["otel_endpoint"] = url  # THREADKEEPER_OTEL_ENDPOINT, one more release
    async with app_factory(**overrides) as h:
        assert (await h.client.post("/v1/threads", json={}, headers=AUTH)).status_code == 201
    # Shutting the app down flushes the batch processor.
    assert received, "no OTLP export arrived"
    names: set[str] = set()
    for path, body in received:
        assert path == "/v1/traces"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            service = {a.key: a.value.string_value for a in rs.resource.attributes}
            assert service["service.name"] == "threadkeeper"
            names |= {s.name for ss in rs.scope_spans for s in ss.spans}
    assert "POST /v1/threads" in names, names
