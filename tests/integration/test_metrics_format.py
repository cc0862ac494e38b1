"""/metrics as a strict scraper (Prometheus 3) reads it: one charset, a well-formed body."""

from __future__ import annotations

import pytest

from tests.support import prometheus_text
from tests.support.api import new_thread
from tests.support.app_harness import AppFactory

pytestmark = pytest.mark.integration


def test_the_strict_reader_refuses_what_prometheus_3_refuses() -> None:
    with pytest.raises(ValueError, match="duplicate parameter"):
        prometheus_text.media_type("text/plain; version=0.0.4; charset=utf-8; charset=utf-8")
    with pytest.raises(ValueError, match="no declared family"):
        prometheus_text.parse("x_total 1\n")
    with pytest.raises(ValueError, match="malformed sample"):
        prometheus_text.parse('# TYPE x gauge\nx{a="1"} \n')


async def test_metrics_content_type_has_one_charset_and_the_body_parses_strictly(
    app_factory: AppFactory,
) -> None:
    async with app_factory() as h:
        await new_thread(h)  # at least one request counted
        resp = await h.client.get("/metrics")
        assert resp.status_code == 200
        kind, params = prometheus_text.media_type(resp.headers["content-type"])
        assert (kind, params) == ("text/plain", {"version": "0.0.4", "charset": "utf-8"})
        families = prometheus_text.parse(resp.text)
        requests = families["threadkeeper_http_requests_total"]
        assert any('route="/v1/threads"' in line and value >= 1 for line, value in requests)
        assert "threadkeeper_queue_depth" in families
