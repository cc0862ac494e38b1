"""Issue 32: /langgraph/openapi.json describes every response (there were 22 `{}` / free-object
success bodies), and declares the error codes the run operations answer."""

from __future__ import annotations

from typing import Any

from app.api.langgraph import langgraph_openapi


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    schemas = doc.get("components", {}).get("schemas", {})
    while "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _free(doc: dict[str, Any], schema: dict[str, Any]) -> bool:
    """A body that says nothing: ``{}``, an object without properties, or a list of such."""
    schema = _resolve(doc, schema)
    if not schema:
        return True
    if schema.get("type") == "array":
        return _free(doc, schema.get("items", {}))
    for key in ("oneOf", "anyOf"):
        if key in schema:
            options = [s for s in schema[key] if _resolve(doc, s).get("type") != "null"]
            return any(_free(doc, s) for s in options)
    return schema.get("type") == "object" and not schema.get("properties")


def free_responses(doc: dict[str, Any]) -> list[str]:
    out = []
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            for status, response in op.get("responses", {}).items():
                if not status.startswith("2"):
                    continue
                for media, body in (response.get("content") or {}).items():
                    if _free(doc, body.get("schema", {})):
                        out.append(f"{method.upper()} {path} {status} {media}")
    return out


def test_every_success_body_is_described() -> None:
    doc = langgraph_openapi()
    assert free_responses(doc) == []
    # The counter does see a free body when there is one.
    probe = {"paths": {"/x": {"get": {"responses": {"200": {"content": {"a": {"schema": {}}}}}}}}}
    assert free_responses(probe) == ["GET /x 200 a"]


def test_run_streams_and_refusals_are_declared() -> None:
    doc = langgraph_openapi()
    stream = doc["paths"]["/threads/{thread_id}/runs/stream"]["post"]["responses"]
    assert "text/event-stream" in stream["200"]["content"]
    assert "agent_mismatch" in stream["422"]["description"]
    assert "thread_busy" in stream["409"]["description"]
    state = _resolve(
        doc,
        doc["paths"]["/threads/{thread_id}/state"]["get"]["responses"]["200"]["content"][
            "application/json"
        ]["schema"],
    )
    assert {"values", "next", "tasks", "checkpoint", "interrupts"} <= set(state["properties"])
