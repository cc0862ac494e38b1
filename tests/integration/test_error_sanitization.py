"""Provider error text never reaches clients, and the key never a log (issue 10 item 2, issue
30 item 4).

A real OpenAI-protocol server answers with an error whose body echoes the API key and names an
internal host; a real worker process (its stderr captured) runs the turn. The run's ``error``,
ListRuns and the SSE events carry neither, only a stable code, a fixed message and the provider's
status and code; the worker's log carries the provider's message for the operator, with the key
masked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.worker.errors import PROVIDER_ERROR
from tests.support.api import new_thread
from tests.support.app_harness import API_KEY, AUTH, OTHER_KEY, AppFactory
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.processes import app_process, reaped, wait_exit

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROVIDER_KEY = "sk-live-7Hq2XbV9mKp4Lr8Tz3Nw"
INTERNAL_HOST = "llm-gw-03.corp.internal"
LEAKY_BODY = {
    "error": {
        "message": (
            f"Incorrect API key provided: {PROVIDER_KEY}. Upstream {INTERNAL_HOST}:8443 "
            f"rejected the request (Authorization: Bearer {PROVIDER_KEY})."
        ),
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}


async def test_provider_error_text_reaches_neither_clients_nor_logs(
    app_factory: AppFactory, clean_db: str, tmp_path: Path
) -> None:
    with OpenAICompatibleServer() as srv:
        srv.fail_next(401, LEAKY_BODY)
        env = {
            "DATABASE_URL": clean_db,
            "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "workdir"),
            "THREADKEEPER_API_KEYS": f"alice:{API_KEY},bob:{OTHER_KEY}",
            "THREADKEEPER_LLM_BASE_URL": srv.base_url,
            "THREADKEEPER_LLM_API_KEY": PROVIDER_KEY,
            "THREADKEEPER_LOG_LEVEL": "DEBUG",  # the most a deployment could log
            "THREADKEEPER_LOG_JSON": "true",
            "THREADKEEPER_WORKER_POLL_SECONDS": "0.1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        async with app_factory(
            start_worker=False, llm_base_url=srv.base_url, llm_api_key=PROVIDER_KEY
        ) as h:
            tid = await new_thread(h)
            posted = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "hello"}, headers=AUTH
            )
            assert posted.status_code == 202
            log = tmp_path / "worker.log"
            proc = app_process(["worker"], env, log)
            with reaped(proc):
                run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=240)
                proc.terminate()
                await wait_exit(proc, 30)
            # The provider really answered the leaky error to the worker's request.
            assert len(srv.requests) == 1
            sent = {k.lower(): v for k, v in srv.request_headers[0].items()}
            assert sent["authorization"] == f"Bearer {PROVIDER_KEY}"

            assert run["status"] == "failed"
            assert run["error_code"] == "provider_error"
            assert run["error"] == PROVIDER_ERROR.message
            got = await h.client.get(f"/v1/runs/{run['id']}", headers=AUTH)
            listed = await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)
            events = await h.sse_events(run["id"])
            final = events[-1]["data"]
            assert final["status"] == "failed" and final["error_code"] == "provider_error"
            assert final["error"] == PROVIDER_ERROR.message

        logs = log.read_text(errors="replace")
        failed = [
            json.loads(line)
            for line in logs.splitlines()
            if line.startswith("{") and '"run_failed"' in line
        ]
        assert len(failed) == 1, logs[-3000:]  # the failure was logged, diagnosable
        assert failed[0]["error_code"] == "provider_error"
        assert failed[0]["provider_status"] == 401
        assert failed[0]["provider_code"] == "invalid_api_key"
        assert "[redacted]" in failed[0]["provider_message"]
        assert INTERNAL_HOST in failed[0]["provider_message"]  # the operator's to read
        assert PROVIDER_KEY not in logs
        for leak in (PROVIDER_KEY, INTERNAL_HOST):
            for where, text in (
                ("GetRun", got.text),
                ("ListRuns", listed.text),
                ("SSE", json.dumps(events)),
            ):
                assert leak not in text, (leak, where)
