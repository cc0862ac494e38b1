"""The Litestar application factory and its lifespan."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import structlog
from litestar import Litestar, Response, Router, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.types import ASGIApp, Receive, Scope, Send

from app.api.auth import ApiKeyAuthority, api_key_guard, provide_principal
from app.api.console import console_handlers
from app.api.controllers.context import ContextController
from app.api.controllers.knowledge_base import KnowledgeBaseController
from app.api.controllers.runs import RunController, ThreadRunsController
from app.api.controllers.threads import ThreadController
from app.api.errors import EXCEPTION_HANDLERS
from app.api.json_guard import GuardedRequest
from app.api.schemas import HealthOut
from app.config import Settings, load_settings
from app.container import Container, build_container
from app.log_redaction import secrets_of
from app.logging import configure_logging

log = structlog.get_logger(__name__)

ContainerFactory = Callable[[Settings], Awaitable[Container]]


def _from_container(attr: str) -> Provide:
    def provider(state: State) -> Any:
        return getattr(state.container, attr)

    return Provide(provider, sync_to_thread=False)


def request_id_middleware(app: ASGIApp) -> ASGIApp:
    """Bind a request id to every log line of the request and echo it back."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"x-request-id", b"").decode("latin-1")[:100]
        request_id = raw if raw and raw.replace("-", "").isalnum() else uuid.uuid4().hex
        structlog.contextvars.bind_contextvars(request_id=request_id)

        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            # Path only: query strings may carry user text; headers (keys) are never logged.
            log.info(
                "http_request",
                method=scope.get("method"),
                path=scope.get("path"),
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 1),
            )
            structlog.contextvars.unbind_contextvars("request_id")

    return middleware


@get("/health", operation_id="Health", tags=["ops"])
async def health() -> HealthOut:
    return HealthOut(status="ok")


@get("/ready", operation_id="Ready", tags=["ops"])
async def ready(state: State) -> Response[HealthOut]:
    container: Container | None = getattr(state, "container", None)
    if container is None:
        return Response(HealthOut(status="starting"), status_code=503)
    try:
        await container.ping()
        lag = await container.schema_lag()
    except Exception as exc:
        return Response(HealthOut(status="unavailable", detail=type(exc).__name__), status_code=503)
    if lag is not None:  # not migrated (yet): serving would fail on missing tables
        return Response(HealthOut(status="migrating", detail=lag), status_code=503)
    return Response(HealthOut(status="ready"))


def create_app(
    settings: Settings | None = None,
    *,
    container_factory: ContainerFactory | None = None,
) -> Litestar:
    settings = settings or load_settings()
    configure_logging(settings.log_level, settings.log_json, secrets_of(settings))
    factory: ContainerFactory = container_factory or build_container

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        container = await factory(settings)
        app.state.container = container
        try:
            yield
        finally:
            await container.close()

    v1 = Router(
        path="/",
        guards=[api_key_guard],
        route_handlers=[
            ThreadController,
            ThreadRunsController,
            RunController,
            ContextController,
            KnowledgeBaseController,
        ],
        security=[{"BearerAuth": []}],
    )
    return Litestar(
        route_handlers=[health, ready, v1, *console_handlers()],
        lifespan=[lifespan],
        dependencies={
            "principal": Provide(provide_principal),
            "thread_service": _from_container("threads"),
            "intake_service": _from_container("intake"),
            "run_service": _from_container("runs"),
            "kb_service": _from_container("kb"),
            "agent_state_service": _from_container("agent_state"),
            "compression_service": _from_container("compression"),
            "workdir_file_service": _from_container("workdir_files"),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[request_id_middleware],
        request_max_body_size=settings.max_request_bytes,
        request_class=GuardedRequest,
        state=State({"authority": ApiKeyAuthority(settings.api_key_map()), "settings": settings}),
        openapi_config=OpenAPIConfig(
            title="Threadkeeper",
            version="0.1.0",
            components=Components(
                security_schemes={
                    "BearerAuth": SecurityScheme(
                        type="http", scheme="bearer", description="API key"
                    )
                }
            ),
        ),
        debug=False,
    )
