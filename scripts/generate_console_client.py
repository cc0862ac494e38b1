#!/usr/bin/env python3
"""Generate the console's JavaScript API client from the service's OpenAPI document.

One exported function per ``operationId`` (camelCase) with JSDoc types taken from the schema, one
``@typedef`` per component schema, and ``createClient(config)`` binding them all to a config.
The output depends only on the document (examples are ignored, everything is sorted), so
``tests/unit/test_console_client.py`` can regenerate it and require the committed file to match.

    .venv/bin/python scripts/generate_console_client.py            # write app/static/console/...
    .venv/bin/python scripts/generate_console_client.py --check    # exit 1 when it drifted
    .venv/bin/python scripts/generate_console_client.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "app" / "static" / "console" / "api-client.js"
METHODS = ("get", "put", "post", "patch", "delete")

RUNTIME = """\
/**
 * @typedef {Object} ClientConfig
 * @property {string} [baseUrl] Prefix of every path; "" (default) means the page's own origin.
 * @property {string | (() => string)} [apiKey] Bearer API key, or a function returning it.
 * @property {typeof fetch} [fetch] The fetch implementation (default: globalThis.fetch).
 */

/**
 * @typedef {Object} RequestOptions
 * @property {AbortSignal} [signal] Aborts the request.
 * @property {boolean} [raw] Resolve with the `Response` itself (streams, headers); errors still throw.
 * @property {Record<string, string>} [headers] Extra request headers.
 */

/** A non-2xx answer. `code` is the API's stable error code (`thread_busy`, `not_found`, ...). */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} detail
   * @param {unknown} body
   */
  constructor(status, code, detail, body) {
    super(detail ? `${code}: ${detail}` : code);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.body = body;
  }
}

/** @param {unknown} value */
function encodePathValue(value) {
  // Segment-wise, so a workdir path such as "results/a.json" keeps its slashes.
  return String(value).split("/").map(encodeURIComponent).join("/");
}

/**
 * @param {Response} response
 * @returns {Promise<ApiError>}
 */
async function toApiError(response) {
  const text = await response.text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  const isObject = typeof body === "object" && body !== null;
  const code = isObject && typeof body.error === "string" ? body.error : `http_${response.status}`;
  const detail = isObject && typeof body.detail === "string" ? body.detail : String(text);
  return new ApiError(response.status, code, detail, body);
}

/**
 * @typedef {Object} Operation
 * @property {string} method
 * @property {string} path
 * @property {string[]} pathParams
 * @property {string[]} queryParams
 * @property {boolean} hasBody
 * @property {boolean} auth
 */

/**
 * @param {ClientConfig} config
 * @param {Operation} op
 * @param {Record<string, any>} args
 * @param {RequestOptions} options
 */
async function request(config, op, args, options) {
  let path = op.path;
  for (const name of op.pathParams) {
    if (args[name] === undefined || args[name] === null) {
      throw new TypeError(`missing path parameter ${name}`);
    }
    path = path.replace(`{${name}}`, encodePathValue(args[name]));
  }
  const query = new URLSearchParams();
  for (const name of op.queryParams) {
    const value = args[name];
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? value : [value]) query.append(name, String(item));
  }
  const qs = query.toString();
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  if (op.auth) {
    const key = typeof config.apiKey === "function" ? config.apiKey() : config.apiKey;
    if (key) headers.Authorization = `Bearer ${key}`;
  }
  /** @type {RequestInit} */
  const init = { method: op.method, headers, signal: options.signal };
  if (op.hasBody) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(args.body ?? {});
  }
  const doFetch = config.fetch || globalThis.fetch.bind(globalThis);
  const response = await doFetch(`${config.baseUrl || ""}${path}${qs ? `?${qs}` : ""}`, init);
  if (!response.ok) throw await toApiError(response);
  if (options.raw) return response;
  if (response.status === 204) return undefined;
  const type = response.headers.get("Content-Type") || "";
  return type.includes("json") ? response.json() : response.text();
}
"""


def camel(operation_id: str) -> str:
    name = operation_id[:1].lower() + operation_id[1:]
    if not re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", name):
        raise ValueError(f"operationId {operation_id!r} is not a JavaScript identifier")
    return name


def comment(text: str) -> str:
    return " ".join(text.replace("*/", "*\\/").split())


def js_type(schema: dict[str, Any]) -> str:
    """A JSDoc (TypeScript-flavoured) type expression for a JSON schema."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return "(" + " | ".join(json.dumps(v) for v in schema["enum"]) + ")"
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return "(" + " | ".join(js_type(s) for s in schema[key]) + ")"
    kind = schema.get("type")
    if isinstance(kind, list):
        return "(" + " | ".join(js_type({**schema, "type": k}) for k in kind) + ")"
    if kind in ("integer", "number"):
        return "number"
    if kind in ("string", "boolean", "null"):
        return str(kind)
    if kind == "array":
        return f"Array<{js_type(schema.get('items') or {})}>"
    if kind == "object" or "properties" in schema:
        props = schema.get("properties")
        if props:
            required = set(schema.get("required") or [])
            fields = [
                f"{name}{'' if name in required else '?'}: {js_type(sub)}"
                for name, sub in props.items()
            ]
            return "{" + ", ".join(fields) + "}"
        extra = schema.get("additionalProperties")
        inner = js_type(extra) if isinstance(extra, dict) else "any"
        return f"Record<string, {inner}>"
    return "any"


def notes(schema: dict[str, Any]) -> str:
    """Constraints and defaults worth knowing at the call site, e.g. ``uuid; 1..200; default 50``."""
    parts: list[str] = []
    if "format" in schema:
        parts.append(str(schema["format"]))
    for variant in schema.get("oneOf") or []:
        if "format" in variant:
            parts.append(str(variant["format"]))
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None or hi is not None:
        parts.append(f"{_num(lo) if lo is not None else ''}..{_num(hi) if hi is not None else ''}")
    lo, hi = schema.get("minLength"), schema.get("maxLength")
    if lo is not None or hi is not None:
        parts.append(f"length {lo or 0}..{hi if hi is not None else ''}")
    if "pattern" in schema:
        parts.append(f"pattern {schema['pattern']}")
    if "default" in schema:
        parts.append(f"default {json.dumps(schema['default'])}")
    text = "; ".join(parts)
    if schema.get("description"):
        text = f"{comment(schema['description'])}{f' ({text})' if text else ''}"
    return comment(text)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def render_typedef(name: str, schema: dict[str, Any]) -> list[str]:
    lines = ["/**"]
    if schema.get("description"):
        lines.append(f" * {comment(schema['description'])}")
    props = schema.get("properties")
    if not props:
        return [*lines, f" * @typedef {{{js_type(schema)}}} {name}", " */"]
    lines.append(f" * @typedef {{Object}} {name}")
    required = set(schema.get("required") or [])
    for prop, sub in props.items():
        label = prop if prop in required else f"[{prop}]"
        note = notes(sub)
        lines.append(f" * @property {{{js_type(sub)}}} {label}{f' {note}' if note else ''}")
    return [*lines, " */"]


def _success(op: dict[str, Any]) -> tuple[str, str]:
    codes = sorted(c for c in op.get("responses", {}) if str(c).startswith("2"))
    if not codes:
        return "200", "void"
    code = codes[0]
    content = op["responses"][code].get("content") or {}
    if not content:
        return code, "void"
    media, spec = sorted(content.items())[0]
    schema = spec.get("schema") or {}
    if not schema:
        return code, "any"
    if media.startswith("text/"):
        return code, "string"
    return code, js_type(schema)


def render_operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    name = camel(op["operationId"])
    params = op.get("parameters") or []
    path_params = [p for p in params if p["in"] == "path"]
    query_params = [p for p in params if p["in"] == "query"]
    body = ((op.get("requestBody") or {}).get("content") or {}).get("application/json")
    auth = bool(op.get("security"))

    fields = []
    for p in [*path_params, *query_params]:
        optional = "" if p.get("required") else "?"
        fields.append(f"{p['name']}{optional}: {js_type(p.get('schema') or {})}")
    if body is not None:
        optional = "" if op["requestBody"].get("required") else "?"
        fields.append(f"body{optional}: {js_type(body.get('schema') or {})}")
    all_optional = all("?:" in f for f in fields)
    status, returns = _success(op)

    lines = ["/**", f" * {op['operationId']}: {method.upper()} {path} ({status})"]
    if op.get("description"):
        lines += [" *", f" * {comment(op['description'])}"]
    lines.append(" *")
    lines.append(" * @param {ClientConfig} config")
    args_type = "{" + ", ".join(fields) + "}"
    lines.append(f" * @param {{{args_type}}} {'[args]' if all_optional else 'args'}")
    for p in [*path_params, *query_params]:
        note = notes(p.get("schema") or {})
        if note:
            lines.append(f" *   - {p['name']}: {note}")
    lines.append(" * @param {RequestOptions} [options]")
    lines.append(f" * @returns {{Promise<{returns}>}}")
    for code, resp in sorted(op.get("responses", {}).items()):
        if not str(code).startswith("2"):
            # The operation's own codes (x-error-codes) when listed, else its description.
            said = " / ".join(resp.get("x-error-codes") or []) or resp.get("description", "")
            lines.append(f" * @throws {{ApiError}} {code} {comment(said)}")
    lines.append(" */")
    spec = {
        "method": method.upper(),
        "path": path,
        "pathParams": [p["name"] for p in path_params],
        "queryParams": [p["name"] for p in query_params],
        "hasBody": body is not None,
        "auth": auth,
    }
    lines.append(f"export function {name}(config, args = {{}}, options = {{}}) {{")
    lines.append(f"  return request(config, {json.dumps(spec)}, args, options);")
    lines.append("}")
    return lines


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    found = [
        (path, method, op)
        for path, item in doc.get("paths", {}).items()
        for method, op in item.items()
        if method in METHODS and op.get("operationId")
    ]
    ids = [op["operationId"] for _, _, op in found]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"duplicate operationIds: {dupes}")
    return sorted(found, key=lambda item: str(item[2]["operationId"]))


def render_client(doc: dict[str, Any]) -> str:
    info = doc.get("info", {})
    out = [
        "// GENERATED FILE, DO NOT EDIT.",
        f"// API client for {info.get('title', 'the API')} {info.get('version', '')}".rstrip()
        + ", generated from its OpenAPI document",
        "// (GET /schema/openapi.json) by scripts/generate_console_client.py. Regenerate with:",
        "//   .venv/bin/python scripts/generate_console_client.py",
        "// tests/unit/test_console_client.py fails when this file no longer matches the API.",
        "",
        RUNTIME,
        "// --- schemas " + "-" * 87,
        "",
    ]
    schemas = doc.get("components", {}).get("schemas", {})
    for name in sorted(schemas):
        out += [*render_typedef(name, schemas[name]), ""]
    out += ["// --- operations " + "-" * 83, ""]
    ops = operations(doc)
    for path, method, op in ops:
        out += [*render_operation(path, method, op), ""]
    out += [
        "/**",
        " * Every operation bound to one config: `createClient({apiKey}).getThread({thread_id})`.",
        " * @param {ClientConfig} [config]",
        " */",
        "export function createClient(config = {}) {",
        "  return {",
    ]
    for _, _, op in ops:
        name = camel(op["operationId"])
        out.append(f"    {name}: (args, options) => {name}(config, args, options),")
    out += ["  };", "}", ""]
    return "\n".join(out)


def local_openapi() -> dict[str, Any]:
    """The document the app would serve, built in-process (no database needed)."""
    sys.path.insert(0, str(ROOT))
    from litestar.serialization import encode_json

    from app.config import load_settings
    from app.main import create_app

    app = create_app(load_settings({}, log_json=False))
    return json.loads(encode_json(app.openapi_schema.to_schema()))  # type: ignore[no-any-return]


def remote_openapi(base_url: str) -> dict[str, Any]:
    import httpx

    resp = httpx.get(base_url.rstrip("/") + "/schema/openapi.json", timeout=30)
    resp.raise_for_status()
    return resp.json()  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="read the document from a running server at this base URL")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="fail if the file is not up to date")
    args = parser.parse_args(argv)
    doc = remote_openapi(args.url) if args.url else local_openapi()
    text = render_client(doc)
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            print(f"{args.output} is out of date; run scripts/generate_console_client.py")
            return 1
        return 0
    if current != text:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
