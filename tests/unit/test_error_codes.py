"""Statuses and error codes are enums in the OpenAPI document, and the error enum is complete.

A generated client turns an enum into a closed type (openapi-python-client raises on a value it
does not know), so every code the service can answer must be listed: the domain errors' codes,
the framework-error mapping, the literal codes of app/api/errors.py and those the HTTP server
answers itself (app/http_server.py, before any request reaches Litestar).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest

import app.main  # noqa: F401  (imports every module that defines a DomainError)
from app import http_server
from app.api import error_codes
from app.api import errors as api_errors
from app.api import langgraph as langgraph_api
from app.api.schemas import ErrorCode
from app.config import load_settings
from app.db.models import RequestStatus, RunStatus
from app.domain.errors import DomainError
from app.domain.states import RequestStatusName, RunStatusName
from tests.support.document import served_openapi_document


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def _answered_codes() -> set[str]:
    """Every code the service can answer: the domain errors', the framework mapping's, the
    literal codes of app/api/errors.py and those the HTTP server answers itself."""
    domain = {sub.code for sub in _subclasses(DomainError)}
    mapped = set(error_codes.FRAMEWORK_CODES.values()) | {error_codes.HTTP_ERROR}
    source = Path(api_errors.__file__).read_text()
    literal = set(re.findall(r'_body\(\s*"([a-z_]+)"', source))
    assert literal, "the literal-code scan found nothing: update the test"
    # The HTTP server answers a few itself (408, 431, malformed HTTP), before the app runs.
    server = Path(http_server.__file__).read_text()
    raw = set(re.findall(r'_raw_response\(\s*"([a-z_]+)"', server))
    assert {"request_timeout", "request_header_too_large", "validation_error"} <= raw, raw
    # The LangGraph door's own validation answer.
    door = Path(langgraph_api.__file__).read_text()
    lg = set(re.findall(r'"error": "([a-z_]+)"', door))
    assert lg == {"unprocessable"}, lg
    return domain | mapped | literal | raw | lg


def test_every_code_the_service_answers_is_in_the_enum() -> None:
    known = {c.value for c in ErrorCode}
    answered = _answered_codes()
    assert answered <= known, answered - known
    # ...and the enum lists nothing the service never answers.
    assert known <= answered | set(error_codes.STATUS), known - answered


def test_one_code_one_status() -> None:
    """A client branches on the code alone: every code has exactly one status, from one map."""
    answered = _answered_codes() - {error_codes.HTTP_ERROR}
    assert answered <= set(error_codes.STATUS), answered - set(error_codes.STATUS)
    assert set(error_codes.STATUS) | {error_codes.HTTP_ERROR} == {c.value for c in ErrorCode}
    # The framework mapping is the map read backwards: a status's code answers at that status.
    for status, code in error_codes.FRAMEWORK_CODES.items():
        assert error_codes.STATUS[code] == status, (status, code)
    # The codes that had two statuses now have one each (issue 31 item 4).
    assert error_codes.status_of("validation_error") == 400
    assert error_codes.status_of("not_supported") == 422
    assert error_codes.status_of("not_implemented") == 501
    assert error_codes.status_of("invalid_tool_arguments") == 422
    # No domain error carries a status of its own beside the map.
    assert not [sub for sub in _subclasses(DomainError) if "status_code" in vars(sub)]


def test_run_error_codes_match_the_schema_enum() -> None:
    from typing import get_args

    from app.domain.states import RunErrorCode
    from app.worker import errors as run_errors

    codes = {v.code for v in vars(run_errors).values() if isinstance(v, run_errors.RunError)}
    assert codes and codes == set(get_args(RunErrorCode))


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return served_openapi_document()


def _enum(document: dict[str, Any], schema: str, prop: str) -> list[str]:
    node = document["components"]["schemas"][schema]["properties"][prop]
    while "$ref" in node or "oneOf" in node:
        if "$ref" in node:
            node = document["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
        else:
            node = next(n for n in node["oneOf"] if n.get("type") != "null")
    return sorted(v for v in node["enum"] if v is not None)


@pytest.mark.parametrize(
    ("schema", "prop", "values"),
    [
        ("ErrorBody", "error", sorted(c.value for c in ErrorCode)),
        ("RunOut", "status", ["cancelled", "completed", "failed", "interrupted", "running"]),
        ("RequestOut", "status", ["cancelled", "dispatched", "queued"]),
        (
            "RequestOut",
            "run_status",
            ["cancelled", "completed", "failed", "interrupted", "running"],
        ),
        ("ThreadOut", "status", ["idle", "interrupted", "queued", "running"]),
        ("MessageOut", "role", ["assistant", "tool", "user"]),
        (
            "StatusEvent",
            "status",
            ["cancelled", "completed", "failed", "interrupted", "resumed", "running"],
        ),
    ],
)
def test_statuses_are_enums_in_the_schema(
    document: dict[str, Any], schema: str, prop: str, values: list[str]
) -> None:
    assert _enum(document, schema, prop) == values


def test_stream_documents_every_event_payload(document: dict[str, Any]) -> None:
    """The stream's item schema is RunEvent: the payloads, discriminated on ``type``."""
    op = document["paths"]["/v1/runs/{run_id}/events"]["get"]
    schema = op["responses"]["200"]["content"]["text/event-stream"]["schema"]
    assert schema == {"$ref": "#/components/schemas/RunEvent"}
    schemas = document["components"]["schemas"]
    union = schemas["RunEvent"]
    mapping = {k: v.rsplit("/", 1)[1] for k, v in union["discriminator"]["mapping"].items()}
    assert union["discriminator"]["propertyName"] == "type"
    assert [s["$ref"].rsplit("/", 1)[1] for s in union["oneOf"]] == list(mapping.values())
    for event, payload in mapping.items():
        assert schemas[payload]["properties"]["type"]["const"] == event
        assert "type" in schemas[payload]["required"]
    assert mapping == {
        "status": "StatusEvent",
        "delta": "DeltaEvent",
        "message": "MessageAddedEvent",
        "compression": "CompressionEvent",
        "provider_retry": "ProviderRetryEvent",
    }


def test_cors_origins_are_validated_at_start() -> None:
    settings = load_settings({"THREADKEEPER_CORS_ORIGINS": "https://a.example, http://b:5173/"})
    assert settings.http.cors_origin_list() == ["https://a.example", "http://b:5173"]
    assert load_settings({}).http.cors_origin_list() == []
    with pytest.raises(ValueError, match="THREADKEEPER_CORS_ORIGINS"):
        load_settings({"THREADKEEPER_CORS_ORIGINS": "a.example"})


@pytest.mark.parametrize(
    ("enum_type", "names"),
    [(RequestStatus, RequestStatusName), (RunStatus, RunStatusName)],
)
def test_status_enums_hold_exactly_their_vocabulary(enum_type: type, names: Any) -> None:
    """``_value_`` types the ORM enums' values as these Literals (the schemas' types): they must
    be the same set, or a mapper would hand a response a value its schema does not declare."""
    assert {m.value for m in enum_type} == set(get_args(names))
