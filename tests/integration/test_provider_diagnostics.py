"""A provider failure is diagnosable (issue 30, item 4).

A wrong key, a wrong base URL, a wrong model and an endpoint that refuses connections each reach
a real local HTTP server (or a closed port) through the real clients. The run says which, on both
HTTP doors, by declared machine-readable fields (``provider_status``, ``provider_code``: never the
provider's text), and the ``run_failed`` log line names the agent, the model, the endpoint
(host:port), the provider's status, code and message, with the key masked even when the provider
echoes it.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tests.support.api import new_thread
from tests.support.app_harness import AUTH, AppFactory, AppHarness
from tests.support.openai_server import OpenAICompatibleServer

pytestmark = pytest.mark.integration

PROVIDER_KEY = "sk-live-7Hq2XbV9mKp4Lr8Tz3Nw"
ECHOING_401 = {
    "error": {
        "message": f"Incorrect API key provided: {PROVIDER_KEY} (Authorization: Bearer {PROVIDER_KEY})",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
MODEL_404 = {
    "error": {
        "message": "The model `gpt-nope` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
}


async def failed_run(h: AppHarness) -> tuple[dict[str, Any], dict[str, Any]]:
    """Post one message; its failed run as /v1 and as the LangGraph door show it."""
    tid = await new_thread(h)
    posted = await h.client.post(
        f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH
    )
    assert posted.status_code == 202
    run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=120)
    assert run["status"] == "failed", run
    got = await h.client.get(f"/v1/runs/{run['id']}", headers=AUTH)
    assert got.status_code == 200
    door = await h.client.get(f"/threads/{tid}/runs", headers=AUTH)
    assert door.status_code == 200, door.text
    [lg_run] = door.json()
    assert lg_run["status"] == "error"
    return got.json(), lg_run


def run_failed_line(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    lines = [
        r.msg
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "run_failed"
    ]
    assert len(lines) == 1, lines
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on exit: nothing listens there


async def test_a_wrong_key_says_401_invalid_api_key_and_the_log_masks_the_echoed_key(
    app_factory: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with OpenAICompatibleServer() as srv:
        srv.fail_next(401, ECHOING_401)
        port = srv.port
        async with app_factory(llm_base_url=srv.base_url, llm_api_key=PROVIDER_KEY) as h:
            run, lg_run = await failed_run(h)
    assert (run["error_code"], run["provider_status"], run["provider_code"]) == (
        "provider_error",
        401,
        "invalid_api_key",
    )
    assert lg_run["threadkeeper"] == {
        "error_code": "provider_error",
        "provider_status": 401,
        "provider_code": "invalid_api_key",
    }
    assert "Incorrect API key" not in str(run) + str(lg_run)  # the provider's text: log only
    line = run_failed_line(caplog)
    assert line["agent_id"] == "default"
    assert line["model"] == "openai:gpt-4o-mini"
    assert line["endpoint"] == f"127.0.0.1:{port}"
    assert (line["provider_status"], line["provider_code"]) == (401, "invalid_api_key")
    assert "Incorrect API key provided" in line["provider_message"]
    assert "[redacted]" in line["provider_message"]
    assert PROVIDER_KEY not in str(line) and PROVIDER_KEY not in caplog.text


@pytest.mark.parametrize(
    ("path", "fault", "code"),
    [("/wrong", None, "not_found"), ("/v1", MODEL_404, "model_not_found")],
    ids=["wrong-base-url", "wrong-model"],
)
async def test_a_wrong_base_url_or_model_says_404_and_which(
    app_factory: AppFactory,
    caplog: pytest.LogCaptureFixture,
    path: str,
    fault: dict[str, Any] | None,
    code: str,
) -> None:
    with OpenAICompatibleServer() as srv:
        if fault is not None:
            srv.fail_next(404, fault)
        port = srv.port
        base = f"http://127.0.0.1:{port}{path}"
        async with app_factory(llm_base_url=base, llm_api_key=PROVIDER_KEY) as h:
            run, lg_run = await failed_run(h)
    assert (run["provider_status"], run["provider_code"]) == (404, code)
    assert lg_run["threadkeeper"]["provider_status"] == 404
    assert lg_run["threadkeeper"]["provider_code"] == code
    line = run_failed_line(caplog)
    assert (line["provider_status"], line["provider_code"]) == (404, code)
    assert line["endpoint"] == f"127.0.0.1:{port}"


async def test_a_refused_connection_has_no_status_and_names_the_endpoint(
    app_factory: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    port = closed_port()
    base = f"http://127.0.0.1:{port}/v1"
    async with app_factory(llm_base_url=base, llm_api_key=PROVIDER_KEY, llm_max_retries=0) as h:
        run, lg_run = await failed_run(h)
    assert (run["error_code"], run["provider_status"], run["provider_code"]) == (
        "provider_error",
        None,
        None,
    )
    assert lg_run["threadkeeper"] == {
        "error_code": "provider_error",
        "provider_status": None,
        "provider_code": None,
    }
    line = run_failed_line(caplog)
    assert line["endpoint"] == f"127.0.0.1:{port}"
    assert line["provider_status"] is None
    assert line["error_type"].endswith("ConnectionError"), line
