"""Every operation declares exactly the errors it can answer (app/api/error_declarations.py):
the OpenAPI document is written from the same declaration the runtime check reads, and that
check fails any test (tests/conftest.py) whose app answered a code its operation lacks."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from litestar.handlers.http_handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute

from app.api.error_declarations import declared_errors
from app.api.errors import UNDECLARED
from app.api.schemas import ErrorCode
from tests.conftest import AUTH, AppFactory
from tests.support.api import new_thread

pytestmark = pytest.mark.integration

RETRY_AFTER = {
    "thread_busy",
    "rate_limited",
    "too_many_streams",
    "database_unavailable",
    "database_not_migrated",
    "streams_unavailable",
    "identity_provider_unavailable",
}


def _handlers(app: Any) -> dict[str, tuple[str, str, HTTPRouteHandler]]:
    out = {}
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            for handler in route.route_handlers:
                if handler.resolve_include_in_schema():
                    for method in handler.http_methods:
                        out[handler.operation_id] = (route.path_format, method.lower(), handler)
    return out


async def test_the_document_declares_each_operations_own_codes(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        doc = (await h.client.get("/schema/openapi.json")).json()
        handlers = _handlers(h.app)
    assert handlers, "no operations found"
    known = {c.value for c in ErrorCode}
    for op_id, (path, method, handler) in handlers.items():
        op = doc["paths"][path][method]
        declared = declared_errors(handler)
        documented = {
            int(status): tuple(response.get("x-error-codes", ()))
            for status, response in op["responses"].items()
            if int(status) >= 400 and "x-error-codes" in response
        }
        assert documented == declared, op_id
        for status, codes in declared.items():
            response = op["responses"][str(status)]
            assert set(codes) <= known, (op_id, codes)
            for code in codes:  # the description names each code, and no other
                assert f"`{code}`" in response["description"], (op_id, status, code)
            others = known - set(codes)
            assert not any(f"`{o}`:" in response["description"] for o in others), (op_id, status)
            # The body is narrowed to exactly these codes (a generated client can tell them apart).
            ref = response["content"]["application/json"]["schema"]["$ref"]
            body = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
            code_ref = body["properties"]["error"]["$ref"]
            enum = doc["components"]["schemas"][code_ref.rsplit("/", 1)[1]]["enum"]
            assert sorted(enum) == sorted(codes), (op_id, status, ref)
            has_retry = "Retry-After" in (response.get("headers") or {})
            assert has_retry == bool(RETRY_AFTER & set(codes)), (op_id, status)
        # What the stack answers for any route of its kind.
        assert {400, 405, 408, 431, 500} <= set(declared), op_id
        if op.get("security"):
            assert {401, 429, 503} <= set(declared), op_id
        assert (413 in declared) == ("requestBody" in op), op_id
    ready = doc["paths"]["/ready"]["get"]["responses"]["503"]
    assert ready["content"]["application/json"]["schema"]["$ref"].endswith("HealthOut")
    workdir = doc["paths"]["/v1/threads/{thread_id}/workdir/{path}"]["get"]["responses"]["200"]
    assert {"ETag", "X-Content-SHA256", "Repr-Digest"} <= set(workdir["headers"])
    narrowed = {op_id: declared_errors(hd).get(409) for op_id, (_, _, hd) in handlers.items()}
    assert narrowed["CancelRequest"] == ("thread_busy", "request_not_queued")
    assert narrowed["CancelRun"] == ("thread_busy", "invalid_state")
    assert narrowed["GetRun"] is None


async def test_an_undeclared_answer_is_caught(app_factory: AppFactory) -> None:
    """The check itself: an operation answering a code it did not declare is recorded."""
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        # CompressContext on an empty thread: 422 nothing_to_compress, declared.
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 422
        assert UNDECLARED == [] or all("CompressContext" not in u for u in UNDECLARED)
        handler = _handlers(h.app)["GetThread"][2]
        saved = dict(handler.responses or {})
        handler.responses = {}  # GetThread now declares no 404 of its own
        try:
            before = len(UNDECLARED)
            missing = await h.client.get(f"/v1/threads/{uuid.uuid4()}", headers=AUTH)
            assert missing.status_code == 404
            assert UNDECLARED[before:] == ["GetThread 404 not_found"]
        finally:
            handler.responses = saved
            del UNDECLARED[before:]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/threads/not-a-uuid",
        "/v1/threads/not-a-uuid/messages",
        "/v1/runs/12345",
        "/v1/runs/x/events",
        "/v1/requests/zzz/wait",
    ],
)
async def test_a_malformed_id_in_a_path_is_a_400_validation_error(
    app_factory: AppFactory, path: str
) -> None:
    async with app_factory(start_worker=False) as h:
        resp = await h.client.get(path, headers=AUTH)
        assert resp.status_code == 400, resp.text
        body = resp.json()
        assert body["error"] == "validation_error"
        assert body["fields"][0]["field"] in ("thread_id", "run_id", "request_id")
