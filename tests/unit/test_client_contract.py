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
