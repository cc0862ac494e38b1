"""Property-based API testing with schemathesis against the live OpenAPI document (issue 6).

The app runs under uvicorn on loopback (real HTTP, real PostgreSQL, offline model). Every
operation of ``/schema/openapi.json`` gets a bounded, derandomized set of generated requests
sent with a valid API key; each response must not be a 5xx and must conform to the document
(status code, content type, headers and body schema), with schemathesis' built-in checks.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Err

from app.api.errors import UNDECLARED
from app.main import create_app
from tests.conftest import AUTH, make_settings
from tests.support.live_server import serve_in_thread

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MAX_EXAMPLES = 10
#: ``positive_data_acceptance`` is left out on purpose: the API rejects some schema-valid values
#: by design (an opaque pagination cursor that was never issued, blank message content, Workdir
#: paths with ``..``), with a documented 400.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,  # the same request without the key must be refused
]


def test_generated_requests_never_get_5xx_and_match_the_schema(
    clean_db: str, tmp_path: Path
) -> None:
    app = create_app(make_settings(clean_db, tmp_path / "workdir"))
    undeclared_before = len(UNDECLARED)
    failures: list[str] = []
    seen: list[str] = []
    statuses: Counter[int] = Counter()
    with serve_in_thread(app) as base_url:
        document = requests.get(f"{base_url}/schema/openapi.json", timeout=30).json()
        schema = schemathesis.openapi.from_dict(with_event_item_schema(document))
        # Seed a real thread with a finished run, so generated requests reach real rows too.
        fixed = seed(base_url)
        session = requests.Session()
        for result in schema.get_all_operations():
            if isinstance(result, Err):
                failures.append(f"unusable operation in the document: {result.err()}")
                continue
            operation = result.ok()
            label = operation.label
            seen.append(label)
            names = set(re.findall(r"\{(\w+)\}", operation.path))
            # DeleteThread gets generated ids: deleting the seeded thread would hide the rest.
            pinned = {} if operation.method.upper() == "DELETE" else fixed
            path_parameters = {k: v for k, v in pinned.items() if k in names}

            @given(case=operation.as_strategy(path_parameters=path_parameters or None))
            @settings(
                max_examples=MAX_EXAMPLES,
                derandomize=True,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def exercise(case: Any) -> None:
                response = case.call(base_url=base_url, session=session, headers=AUTH, timeout=30)
                statuses[response.status_code] += 1
                case.validate_response(response, checks=CHECKS, headers=AUTH)

            try:
                exercise()
            except Exception as exc:  # collect every operation's failure, then report them all
                failures.append(f"{label}: {str(exc)[:1500]}")
    assert len(seen) >= 16 + 2, seen  # every /v1 operation plus /health and /ready
    assert not failures, "\n\n".join(failures)
    # Every error code answered to the generated requests is declared by its operation.
    assert UNDECLARED[undeclared_before:] == []
    print("schemathesis statuses:", dict(sorted(statuses.items())))
    # Real coverage, not a run of 401s: most requests were authorized, many succeeded.
    assert sum(statuses.values()) >= len(seen) * 3
    assert statuses[401] == 0
    assert sum(n for code, n in statuses.items() if 200 <= code < 300) >= 20


def with_event_item_schema(document: dict[str, Any]) -> dict[str, Any]:
    """The stream as schemathesis reads it: the document's event-stream ``schema`` is one
    frame's ``data`` (RunEvent: what the client generators read, docs/clients.md), while
    schemathesis reads an event stream's ``schema`` as the whole SSE event ``{event, id,
    data}``. The same contract in OpenAPI 3.2's form (``itemSchema``, ``data`` as JSON text
    whose ``contentSchema`` is the payload) lets it check every event's payload."""
    op = document["paths"]["/v1/runs/{run_id}/events"]["get"]
    media = op["responses"]["200"]["content"]["text/event-stream"]
    payload = media.pop("schema")
    assert payload == {"$ref": "#/components/schemas/RunEvent"}, payload
    media["itemSchema"] = {
        "type": "object",
        "required": ["event", "id", "data"],
        "properties": {
            "event": {"type": "string", "enum": ["status", "delta", "message", "compression"]},
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": payload,
            },
        },
    }
    return document


def seed(base_url: str) -> dict[str, str]:
    tid = requests.post(f"{base_url}/v1/threads", json={}, headers=AUTH, timeout=30).json()["id"]
    posted = requests.post(
        f"{base_url}/v1/threads/{tid}/messages", json={"content": "hello"}, headers=AUTH, timeout=30
    )
    assert posted.status_code == 202
    for _ in range(600):
        runs = requests.get(f"{base_url}/v1/threads/{tid}/runs", headers=AUTH, timeout=30).json()
        if runs["items"] and runs["items"][0]["status"] == "completed":
            return {"thread_id": tid, "run_id": runs["items"][0]["id"]}
        time.sleep(0.05)
    raise AssertionError("the seeded run never completed")
