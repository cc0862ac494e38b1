"""LangGraph's Agent Server API at the server root (``/assistants``, ``/threads``, ``/info``...),
so langgraph-sdk, @langchain/langgraph-sdk and Agent Chat UI work unchanged.

Backed by the same services as /v1 (intake queue, row lock, worker, event log, compression).
It has its own OpenAPI document (``/langgraph/openapi.json``); the main one stays /v1's.
Malformed requests are 422 ``unprocessable`` here, as LangGraph's server answers them.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from litestar import Litestar, Request, Response, Router, get
from litestar.di import Provide
from litestar.exceptions import ValidationException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme

from app.api.error_codes import status_of
from app.api.errors import field_errors, migrated_schema_guard
from app.api.langgraph.auth import langgraph_key_guard
from app.api.langgraph.runs import LangGraphRunController
from app.api.langgraph.system import AssistantController, info, not_supported, ok
from app.api.langgraph.threads import LangGraphThreadController
from app.api.rate_limit import rate_limit_guard
from app.domain.errors import ValidationFailed

OPENAPI_PATH = "/langgraph/openapi.json"
#: The dependencies the surface's handlers name (provided by ``create_app`` from the container).
DEPENDENCIES = (
    "principal",
    "lg_threads",
    "lg_runs",
    "lg_streams",
    "compression_service",
    "agent_registry",
)


def _unserved(name: str) -> Provide:
    def provider() -> None:  # pragma: no cover - the throwaway app only renders the document
        raise RuntimeError(f"{name} is not served by the documentation app")

    return Provide(provider, sync_to_thread=False)


def _unprocessable(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, ValidationException):
        fields = field_errors(exc.extra)
        detail = "; ".join(f"{f['field']}: {f['message']}" for f in fields) or str(exc.detail)
    else:
        assert isinstance(exc, ValidationFailed)
        fields = [{"field": exc.field, "message": exc.detail}] if exc.field else []
        detail = exc.detail
    # 422 as LangGraph's server answers it, so its own code (one code, one status).
    body: dict[str, Any] = {"error": "unprocessable", "detail": detail}
    if fields:
        body["fields"] = fields
    return Response(body, status_code=status_of("unprocessable"))


def _routers(include_in_schema: bool) -> list[Any]:
    guarded = Router(
        path="/",
        guards=[langgraph_key_guard, rate_limit_guard, migrated_schema_guard],
        route_handlers=[
            AssistantController,
            LangGraphThreadController,
            LangGraphRunController,
            not_supported,
        ],
        exception_handlers={ValidationException: _unprocessable, ValidationFailed: _unprocessable},
        include_in_schema=include_in_schema,
        security=[{"ApiKey": []}, {"BearerAuth": []}],
        tags=["langgraph"],
    )
    # /info and /ok answer without a key (Agent Chat UI's connection check comes first).
    return [
        Router(path="/", route_handlers=[info, ok], include_in_schema=include_in_schema),
        guarded,
    ]


@cache
def langgraph_openapi() -> dict[str, Any]:
    """The surface's own document, rendered by Litestar from a throwaway app of its routes."""
    app = Litestar(
        _routers(True),
        openapi_config=OpenAPIConfig(
            title="Threadkeeper: LangGraph Agent Server API",
            version="0.1.0",
            components=Components(
                security_schemes={
                    "ApiKey": SecurityScheme(
                        type="apiKey", name="X-Api-Key", security_scheme_in="header"
                    ),
                    "BearerAuth": SecurityScheme(type="http", scheme="bearer"),
                }
            ),
        ),
        dependencies={name: _unserved(name) for name in DEPENDENCIES},
        logging_config=None,
    )
    return app.openapi_schema.to_schema()


@get(OPENAPI_PATH, operation_id="LangGraphOpenAPI", include_in_schema=False, sync_to_thread=False)
def langgraph_openapi_document() -> dict[str, Any]:
    return langgraph_openapi()


def langgraph_handlers() -> list[Any]:
    """The surface as the app mounts it (left out of /v1's document)."""
    return [*_routers(False), langgraph_openapi_document]
