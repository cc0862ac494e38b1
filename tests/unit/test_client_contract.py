"""The OpenAPI document's types are what generated clients need (issue 21): named enums, every
response field required, optional inputs, typed nested shapes, no generated examples.

No database: the document needs no container, and the app's lifespan gets a stub one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, get_args

import pytest

from app.api.openapi_types import NAMED_ENUMS
from tests.support.document import served_openapi_document


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return served_openapi_document()


def _nodes(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _nodes(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _nodes(v, f"{path}/{i}")


def _schemas(document: dict[str, Any]) -> dict[str, Any]:
    return document["components"]["schemas"]  # type: ignore[no-any-return]


def test_every_vocabulary_is_one_named_enum(document: dict[str, Any]) -> None:
    schemas = _schemas(document)
    inline = [
        path
        for path, node in _nodes(document)
        if isinstance(node, dict)
        and len(node.get("enum") or []) > 1
        and path.count("/") != 3  # /components/schemas/<Name>: the named enums themselves
    ]
    assert not inline, f"inline enums: {inline}"
    for name, vocabulary in NAMED_ENUMS.items():
        if vocabulary is not None:
            assert schemas[name]["enum"] == list(get_args(vocabulary)), name
    # A nullable vocabulary is the named enum or null (one generated type, not three).
    assert schemas["RequestOut"]["properties"]["run_status"] == {
        "oneOf": [{"$ref": "#/components/schemas/RunStatus"}, {"type": "null"}]
    }


def test_every_response_field_is_required(document: dict[str, Any]) -> None:
    schemas = _schemas(document)
    for name in (
        "RunOut",
        "StatusEvent",
        "ErrorBody",
        "MessageOut",
        "RequestOut",
        "StateMessage",
        "ThreadPage",
        "HealthOut",
        "CompressionEvent",
    ):
        schema = schemas[name]
        assert sorted(schema["required"]) == sorted(schema["properties"]), name


def test_input_fields_with_defaults_are_optional(document: dict[str, Any]) -> None:
    schemas = _schemas(document)
    for name, optional in (
        ("CreateThreadIn", {"title", "agent_id", "metadata"}),
        ("AddDocumentIn", {"source", "url", "chunk_chars"}),
    ):
        props = schemas[name]["properties"]
        assert optional.isdisjoint(schemas[name].get("required", [])), name
        # openapi-typescript makes a property with a `default` required: it is described.
        assert all("default" not in props[p] for p in optional), name
    assert "Default: `1200`" in schemas["AddDocumentIn"]["properties"]["chunk_chars"]["description"]


def _ref(node: dict[str, Any]) -> str:
    target = next(n for n in node.get("oneOf", [node]) if "$ref" in n)
    return str(target["$ref"]).rsplit("/", 1)[1]


def test_nested_shapes_are_typed(document: dict[str, Any]) -> None:
    schemas = _schemas(document)
    state = schemas["StateMessage"]["properties"]
    assert _ref(state["offload"]) == "Offload"
    assert set(schemas["Offload"]["required"]) == {
        "path",
        "sha256",
        "chars",
        "bytes",
        "original_tokens",
    }
    assert _ref(state["type"]) == "StateMessageType"
    tool_calls = next(n for n in state["tool_calls"]["oneOf"] if n.get("type") == "array")
    assert tool_calls["items"] == {"$ref": "#/components/schemas/ToolCall"}
    assert _ref(schemas["RunOut"]["properties"]["interrupt"]) == "HITLRequest"
    assert _ref(schemas["StatusEvent"]["properties"]["interrupt"]) == "HITLRequest"
    assert set(schemas["HITLRequest"]["required"]) == {"action_requests", "review_configs"}
    assert _ref(schemas["CompressionEvent"]["properties"]["reason"]) == "CompressionReason"
    assert "MessageEvent" not in schemas  # the browser's global type
    # A message event names the stored message, it does not copy it.
    assert set(schemas["MessageAddedEvent"]["properties"]) == {"type", "message_id", "seq", "role"}


def test_no_generated_examples_and_a_described_api(document: dict[str, Any]) -> None:
    found = [
        p
        for p, n in _nodes(document)
        if isinstance(n, dict) and ("examples" in n or "example" in n)
    ]
    assert not found, found
    assert "token budget" in document["info"]["description"]


def _error_bodies(document: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(operationId, status) -> the component name of that error response's body."""
    found = {}
    for item in document["paths"].values():
        for op in item.values():
            for status, response in (op.get("responses") or {}).items():
                if "x-error-codes" in response:
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    found[(op["operationId"], status)] = ref.rsplit("/", 1)[1]
    return found


def test_error_bodies_are_narrowed_to_the_operations_codes(document: dict[str, Any]) -> None:
    """Each error response names a body whose ``error`` is an enum of exactly the codes the
    operation declares at that status: one shared body (and enum) per distinct set of codes."""
    schemas = _schemas(document)
    bodies = _error_bodies(document)
    codes_of: dict[str, list[str]] = {}
    for (op_id, status), name in bodies.items():
        response = document["paths"]
        declared = next(
            r["x-error-codes"]
            for item in response.values()
            for op in item.values()
            if op.get("operationId") == op_id
            for s, r in op["responses"].items()
            if s == status
        )
        body = schemas[name]
        assert body["required"] == ["detail", "error", "fields"], name
        assert set(body["properties"]) == set(schemas["ErrorBody"]["properties"]), name
        enum = _ref(body["properties"]["error"])
        assert sorted(schemas[enum]["enum"]) == sorted(declared), (op_id, status)
        assert enum == name.removesuffix("Error") + "Code" or name == enum.removesuffix("Code")
        codes_of.setdefault(name, sorted(declared))
        assert codes_of[name] == sorted(declared), name  # one name, one set
    # One body per distinct set: as many bodies as sets, shared across operations and statuses.
    assert len(set(bodies.values())) == len({tuple(c) for c in codes_of.values()})
    assert bodies[("CancelRun", "409")] == "ThreadBusyOrInvalidStateError"
    assert bodies[("CancelRequest", "409")] == "ThreadBusyOrRequestNotQueuedError"
    assert schemas["ThreadBusyOrRequestNotQueuedCode"]["enum"] == [
        "thread_busy",
        "request_not_queued",
    ]
    assert bodies[("CompressContext", "422")] == "NothingToCompressOrNotSupportedError"
    assert bodies[("GetThread", "404")] == bodies[("GetRun", "404")] == "NotFoundError"
    assert bodies[("ResumeRun", "400")] == "ValidationError"
    assert schemas["ValidationErrorCode"]["enum"] == ["validation_error"]
    # One code, one status: ResumeRun's 422 is its own code, not a second validation_error.
    assert bodies[("ResumeRun", "422")] == "InvalidToolArgumentsError"
    assert schemas["InvalidToolArgumentsCode"]["enum"] == ["invalid_tool_arguments"]
    # The shape and the codes of any error stay, for code that handles every error alike.
    assert "ErrorBody" in schemas and "ErrorCode" in schemas
