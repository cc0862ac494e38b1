"""The document's types as generated clients need them (issue 21), applied to Litestar's output.

Litestar renders each msgspec field on its own: a ``Literal`` becomes an inline enum per field,
a field with a default is optional in responses too, and the stream's item union has no
discriminator. ``shape_types`` rewrites the finished document so that openapi-typescript,
@hey-api/openapi-ts and openapi-python-client all read the same, exact types:

- every vocabulary is one named enum component (``NAMED_ENUMS``), referenced everywhere; a
  nullable one is ``oneOf: [$ref, null]``;
- a response shape lists every property as required: msgspec encodes every field of a struct
  without ``omit_defaults`` (none of ours use it), so the server always sends them;
- a request shape's defaults move into the description: openapi-typescript makes a property
  with a ``default`` required (``defaultNonNullable``), which is true of responses only;
- StreamRunEvents' item schema is ``RunEvent``, the payload union discriminated on ``type``;
- no generated random ``examples``.

Post-processing rather than per-field annotations: Litestar has no way to name a ``Literal``
or to mark a defaulted field required, and one pass keeps the rules in one place.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any, get_args

from litestar.openapi.spec import (
    Discriminator,
    OpenAPI,
    OpenAPIMediaType,
    Reference,
    Schema,
)
from litestar.openapi.spec.enums import OpenAPIType

from app.domain.states import (
    BranchKind,
    CompressionReason,
    DecisionType,
    MessageRole,
    ProviderRetryOutcome,
    RequestStatusName,
    RunErrorCode,
    RunEventStatus,
    RunStatusName,
    StateMessageType,
    ThreadStatus,
)

#: Every vocabulary the API uses, by its component name (the enum values identify them).
NAMED_ENUMS: dict[str, Any] = {
    "RunStatus": RunStatusName,
    "RunEventStatus": RunEventStatus,
    "RequestStatus": RequestStatusName,
    "RunErrorCode": RunErrorCode,
    "ThreadStatus": ThreadStatus,
    "MessageRole": MessageRole,
    "DecisionType": DecisionType,
    "CompressionReason": CompressionReason,
    "ProviderRetryOutcome": ProviderRetryOutcome,
    "StateMessageType": StateMessageType,
    "BranchKind": BranchKind,
    "HealthStatus": None,  # HealthOut.status: filled from app.api.schemas (no domain meaning)
}

#: The stream's item union and its members, by ``type``.
RUN_EVENT = "RunEvent"
RUN_EVENT_MEMBERS = {
    "status": "StatusEvent",
    "delta": "DeltaEvent",
    "message": "MessageAddedEvent",
    "compression": "CompressionEvent",
    "provider_retry": "ProviderRetryEvent",
}
STREAM_OPERATION = "StreamRunEvents"
_REF = "#/components/schemas/"

Node = Schema | Reference


def _values(vocabulary: Any) -> frozenset[str]:
    return frozenset(get_args(vocabulary))


def _rewrite(value: Any, fn: Callable[[Schema], Node]) -> Any:
    """``value`` with every Schema below it replaced by ``fn(schema)`` (children first)."""
    if isinstance(value, list):
        return [_rewrite(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _rewrite(v, fn) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            child = getattr(value, f.name)
            if child is not None and not isinstance(child, (str, int, float, bool)):
                setattr(value, f.name, _rewrite(child, fn))
        if isinstance(value, Schema):
            return fn(value)
    return value


def _refs(value: Any) -> Iterator[str]:
    """The component names ``value`` refers to (directly)."""
    if isinstance(value, Reference):
        yield value.ref.removeprefix(_REF)
    elif isinstance(value, list):
        for v in value:
            yield from _refs(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _refs(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _refs(getattr(value, f.name))


def _closure(roots: set[str], schemas: dict[str, Any]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in schemas:
            continue
        seen.add(name)
        todo.extend(_refs(schemas[name]))
    return seen


def _operations(openapi: OpenAPI) -> Iterator[Any]:
    for item in (openapi.paths or {}).values():
        for method in ("get", "put", "post", "delete", "patch"):
            op = getattr(item, method, None)
            if op is not None:
                yield op


def _named_enum(by_values: dict[frozenset[str], str]) -> Callable[[Schema], Node]:
    def name(schema: Schema) -> Node:
        if not schema.enum or len(schema.enum) < 2:
            return schema
        values = frozenset(v for v in schema.enum if v is not None)
        found = by_values.get(values)
        if found is None:
            return schema
        ref = Reference(ref=_REF + found)
        if None in schema.enum:
            return Schema(
                one_of=[ref, Schema(type=OpenAPIType.NULL)], description=schema.description
            )
        return (
            ref
            if schema.description is None
            else Schema(all_of=[ref], description=schema.description)
        )

    return name


def _no_examples(schema: Schema) -> Node:
    schema.examples = None
    return schema


def name_enums(openapi: OpenAPI, health_statuses: Any) -> None:
    vocabularies = {**NAMED_ENUMS, "HealthStatus": health_statuses}
    by_values = {_values(v): name for name, v in vocabularies.items()}
    components = openapi.components
    schemas = dict(components.schemas or {}) if components else {}
    openapi.paths = _rewrite(openapi.paths, _named_enum(by_values))
    schemas = _rewrite(schemas, _named_enum(by_values))
    for name, vocabulary in vocabularies.items():
        schemas[name] = Schema(type=OpenAPIType.STRING, enum=list(get_args(vocabulary)), title=name)
    components.schemas = dict(sorted(schemas.items()))


def _roots(openapi: OpenAPI) -> tuple[set[str], set[str]]:
    """Component names used directly by responses, and by request bodies and parameters."""
    sent: set[str] = set()
    taken: set[str] = set()
    for op in _operations(openapi):
        sent.update(_refs(op.responses))
        taken.update(_refs(op.request_body))
        taken.update(_refs(op.parameters))
    return sent, taken


def _with_default_described(schema: Node) -> Node:
    if not isinstance(schema, Schema) or schema.default is None:
        return schema
    note = f"Default: `{json.dumps(schema.default)}`."
    schema.description = f"{schema.description} {note}" if schema.description else note
    schema.default = None
    return schema


def require_and_relax(openapi: OpenAPI) -> None:
    """Response shapes: every property required. Request shapes: defaults described only."""
    schemas = openapi.components.schemas or {}
    sent_roots, taken_roots = _roots(openapi)
    sent, taken = _closure(sent_roots, schemas), _closure(taken_roots, schemas)
    for name, schema in schemas.items():
        if not isinstance(schema, Schema) or not schema.properties:
            continue
        if name in sent and name not in taken:
            schema.required = sorted(schema.properties)
        elif name in taken and name not in sent:
            schema.properties = {
                k: _with_default_described(v) for k, v in schema.properties.items()
            }


def stream_items(openapi: OpenAPI) -> None:
    """StreamRunEvents' item schema: the named union of the payloads, discriminated on ``type``."""
    members = [Reference(ref=_REF + name) for name in RUN_EVENT_MEMBERS.values()]
    openapi.components.schemas = {
        **(openapi.components.schemas or {}),
        RUN_EVENT: Schema(
            one_of=members,  # type: ignore[arg-type]
            discriminator=Discriminator(
                property_name="type",
                mapping={k: _REF + v for k, v in RUN_EVENT_MEMBERS.items()},
            ),
            description="One StreamRunEvents frame's `data`; its `type` is the frame's `event`.",
            title=RUN_EVENT,
        ),
    }
    for op in _operations(openapi):
        if op.operation_id == STREAM_OPERATION:
            media = op.responses["200"].content["text/event-stream"]
            assert isinstance(media, OpenAPIMediaType)
            media.schema = Reference(ref=_REF + RUN_EVENT)


def shape_types(openapi: OpenAPI, health_statuses: Any) -> None:
    openapi.paths = _rewrite(openapi.paths, _no_examples)
    if openapi.components is not None:
        openapi.components.schemas = _rewrite(openapi.components.schemas, _no_examples)
    name_enums(openapi, health_statuses)
    stream_items(openapi)
    require_and_relax(openapi)
