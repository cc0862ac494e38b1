"""The console's generated API client cannot drift from the API, and the console is served.

No database: the OpenAPI document needs no container, and the app's lifespan gets a stub one.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.support.document import app_without_database

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "app" / "static" / "console"


def _load_generator() -> ModuleType:
    path = ROOT / "scripts" / "generate_console_client.py"
    spec = importlib.util.spec_from_file_location("generate_console_client", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


@pytest.fixture(scope="module")
def client() -> Any:
    app = app_without_database()
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def served_openapi(client: TestClient[Any]) -> dict[str, Any]:
    resp = client.get("/schema/openapi.json")
    assert resp.status_code == 200
    return resp.json()  # type: ignore[no-any-return]


def test_committed_client_matches_the_served_openapi_document(
    served_openapi: dict[str, Any],
) -> None:
    committed = (CONSOLE / "api-client.js").read_text(encoding="utf-8")
    assert gen.render_client(served_openapi) == committed, (
        "app/static/console/api-client.js is stale: run "
        ".venv/bin/python scripts/generate_console_client.py"
    )


def test_generator_default_source_is_the_same_document(served_openapi: dict[str, Any]) -> None:
    # The script builds the document in-process; it must equal what the server serves.
    assert gen.render_client(gen.local_openapi()) == gen.render_client(served_openapi)
    assert gen.main(["--check"]) == 0


def test_one_function_per_operation(served_openapi: dict[str, Any]) -> None:
    text = gen.render_client(served_openapi)
    op_ids = sorted(
        op["operationId"]
        for item in served_openapi["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "operationId" in op
    )
    exported = sorted(re.findall(r"^export function (\w+)\(config, ", text, flags=re.M))
    assert exported == sorted(op[0].lower() + op[1:] for op in op_ids)
    assert {"compressContext", "getAgentState", "streamRunEvents", "readWorkdirFile"} <= set(
        exported
    )
    # Typed JSDoc straight from the schema.
    assert " * @typedef {Object} ContextInfo" in text
    assert " * @property {boolean} compression_suggested" in text
    assert " * @returns {Promise<CompressOut>}" in text
    assert " * @throws {ApiError} 409 thread_busy / invalid_state" in text


def test_console_only_calls_generated_operations() -> None:
    client_js = (CONSOLE / "api-client.js").read_text(encoding="utf-8")
    bound = set(re.findall(r"^    (\w+): \(args, options\) =>", client_js, flags=re.M))
    used = set(re.findall(r"\bapi\.(\w+)\(", (CONSOLE / "app.js").read_text(encoding="utf-8")))
    assert used and used <= bound, used - bound


def test_js_types() -> None:
    assert gen.js_type({"$ref": "#/components/schemas/ThreadOut"}) == "ThreadOut"
    assert gen.js_type({"oneOf": [{"type": "string"}, {"type": "null"}]}) == "(string | null)"
    assert gen.js_type({"type": "array", "items": {"type": "integer"}}) == "Array<number>"
    assert gen.js_type({"type": "object", "additionalProperties": {}}) == "Record<string, any>"
    assert gen.js_type({"type": "string", "enum": ["a", "b"]}) == '("a" | "b")'
    assert gen.js_type({"type": "string", "const": "queued"}) == '"queued"'
    assert gen.js_type({}) == "any"


def test_output_ignores_random_examples(served_openapi: dict[str, Any]) -> None:
    # Litestar fills `examples` with random values on every build; they must not matter.
    scrubbed = _without_examples(served_openapi)
    assert gen.render_client(scrubbed) == gen.render_client(served_openapi)


def _without_examples(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _without_examples(v) for k, v in node.items() if k not in ("examples", "example")
        }
    if isinstance(node, list):
        return [_without_examples(v) for v in node]
    return node


def test_console_is_served_without_auth_and_outside_the_schema(
    client: TestClient[Any], served_openapi: dict[str, Any]
) -> None:
    root = client.get("/", follow_redirects=False)
    assert root.status_code in (301, 302, 307, 308)
    assert root.headers["location"] == "/console/"
    page = client.get("/console/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '<script type="module" src="/console/app.js">' in page.text
    for name, kind in [
        ("app.js", "javascript"),
        ("api-client.js", "javascript"),
        ("styles.css", "text/css"),
    ]:
        resp = client.get(f"/console/{name}")
        assert resp.status_code == 200, name
        assert kind in resp.headers["content-type"], (name, resp.headers["content-type"])
    assert client.get("/console/missing.js").status_code == 404
    assert not [p for p in served_openapi["paths"] if p == "/" or p.startswith("/console")]
