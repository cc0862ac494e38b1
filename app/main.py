"""The Litestar application factory and its lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import structlog
from litestar import Litestar, Response, Router, get
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Components, SecurityScheme
from opentelemetry.sdk.trace.export import SpanExporter

from app import metrics, telemetry
from app.api.auth import Authenticator, api_key_guard, provide_principal
from app.api.console import console_handlers, openapi_render_plugins
from app.api.controllers.agents import AgentController
from app.api.controllers.branches import BranchController
from app.api.controllers.context import ContextController
from app.api.controllers.knowledge_base import KnowledgeBaseController
from app.api.controllers.requests import RequestController
from app.api.controllers.runs import RunController, ThreadRunsController
from app.api.controllers.threads import ThreadController
from app.api.errors import EXCEPTION_HANDLERS, migrated_schema_guard
from app.api.followers import Followers
from app.api.json_guard import GuardedRequest
from app.api.langgraph import langgraph_handlers
from app.api.langgraph.webhooks import Webhooks
from app.api.observe import observe_requests
from app.api.openapi import dedupe_security, document_errors
from app.api.openapi_types import shape_types
from app.api.rate_limit import RateLimiter, rate_limit_guard
from app.api.schemas import HealthOut, HealthStatus
from app.api.stream_tokens import QUERY_PARAMETER, StreamTokens
from app.config import HttpSettings, Settings, load_settings
from app.container import Container, build_container
from app.log_redaction import secrets_of
from app.logging import configure_logging, warn_unknown_settings
from app.services.metrics import MetricsService

log = structlog.get_logger(__name__)

ContainerFactory = Callable[[Settings], Awaitable[Container]]


def _from_container(attr: str) -> Provide:
    def provider(state: State) -> Any:
        return getattr(state.container, attr)

    return Provide(provider, sync_to_thread=False)


@get("/health", operation_id="Health", tags=["ops"])
async def health() -> HealthOut:
    return HealthOut(status="ok")


@get(
    "/ready",
    operation_id="Ready",
    tags=["ops"],
    responses={
        503: ResponseSpec(
            data_container=HealthOut,
            description="Not ready: `starting`, `unavailable` (the database does not answer) or "
            "`migrating` (the schema is not at the code's version; `detail` says where it is).",
        )
    },
)
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


@get("/metrics", operation_id="Metrics", tags=["ops"], include_in_schema=False)
async def prometheus_metrics(state: State) -> Response[bytes]:
    """Prometheus exposition; no API key (scrapers have none): restrict it at the network.

    The Content-Type is set as a header: given as ``media_type``, Litestar appends its own
    ``; charset=utf-8`` to a ``text/`` type that already has one (two charsets: Prometheus 3
    refuses the target)."""
    container: Container | None = getattr(state, "container", None)
    if container is None:
        return Response(b"starting\n", status_code=503, media_type="text/plain")
    body = await MetricsService(container.sessions).render()
    return Response(body, headers={"Content-Type": metrics.CONTENT_TYPE})


def cors_config(settings: HttpSettings) -> CORSConfig | None:
    """Browsers on the listed origins may call the API (none by default). Preflights are
    answered by Litestar's CORS middleware before routing, so they never need an API key."""
    origins = settings.cors_origin_list()
    if not origins:
        return None
    return CORSConfig(
        allow_origins=origins,
        allow_methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
        allow_headers=[
            "Authorization",
            "Content-Type",
            "Idempotency-Key",
            "Last-Event-ID",
            "X-Request-ID",
            "X-Api-Key",  # the LangGraph surface (langgraph-sdk, Agent Chat UI)
            "Cache-Control",
        ],
        # Content-Location / Location: the LangGraph SDKs read the run id and the join stream.
        expose_headers=[
            "X-Request-ID",
            "ETag",
            "Repr-Digest",
            "X-Content-SHA256",
            "Retry-After",
            "Content-Location",
            "Location",
        ],
        max_age=600,
    )


API_DESCRIPTION = (
    "Runs LLM agent threads and keeps their context under one token budget. Post a message to "
    "a thread (idempotent with `Idempotency-Key`), follow the run that answers it "
    "(StreamRunEvents: server-sent events whose items are `RunEvent`s; WaitRun), read the "
    "history (ListMessages) and the model's view (GetAgentState), compress it on demand "
    "(CompressContext) and read offloaded originals from the Workdir. Every error body is an "
    "`ErrorBody` with a stable `error` code. Authenticate with `Authorization: Bearer <API key>`, "
    "or with a signed-in user's token from the deployment's OpenID Connect identity provider."
)


def create_app(
    settings: Settings | None = None,
    *,
    container_factory: ContainerFactory | None = None,
    span_exporter: SpanExporter | None = None,
) -> Litestar:
    """``span_exporter`` (tests) turns tracing on without an OTLP endpoint."""
    settings = settings or load_settings()
    configure_logging(settings.logging.log_level, settings.logging.log_json, secrets_of(settings))
    warn_unknown_settings()
    factory: ContainerFactory = container_factory or build_container
    provider = telemetry.build_tracer_provider(settings.telemetry, span_exporter)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        container = await factory(settings)
        app.state.container = container
        app.state.authenticator.start()
        if provider is not None:
            telemetry.instrument_engine(container.engine, provider)
            telemetry.activate(provider)
        try:
            yield
        finally:
            # Normally done by the server when shutdown starts (app/http_server.py); here too
            # for servers that go straight to the lifespan's end.
            app.state.followers.close()
            await app.state.webhooks.close()
            await app.state.authenticator.close()
            await container.close()
            telemetry.shutdown(provider)

    v1 = Router(
        path="/",
        guards=[api_key_guard, rate_limit_guard, migrated_schema_guard],
        route_handlers=[
            ThreadController,
            BranchController,
            ThreadRunsController,
            RunController,
            RequestController,
            ContextController,
            KnowledgeBaseController,
            AgentController,
        ],
        security=[{"BearerAuth": []}],
    )
    ops = [health, ready, *([prometheus_metrics] if settings.telemetry.metrics_enabled else [])]
    app = Litestar(
        route_handlers=[*ops, v1, *console_handlers(), *langgraph_handlers()],
        lifespan=[lifespan],
        dependencies={
            "principal": Provide(provide_principal),
            "thread_service": _from_container("threads"),
            "intake_service": _from_container("intake"),
            "branch_service": _from_container("branches"),
            "run_service": _from_container("runs"),
            "run_feed": _from_container("feed"),
            "kb_service": _from_container("kb"),
            "agent_state_service": _from_container("agent_state"),
            "compression_service": _from_container("compression"),
            "workdir_file_service": _from_container("workdir_files"),
            "agent_registry": _from_container("agents"),
            "lg_threads": _from_container("lg_threads"),
            "lg_runs": _from_container("lg_runs"),
            "lg_streams": _from_container("lg_streams"),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        cors_config=cors_config(settings.http),
        request_max_body_size=settings.limits.max_request_bytes,
        request_class=GuardedRequest,
        state=State(
            {
                "authenticator": Authenticator.from_settings(settings.auth),
                "settings": settings,
                "rate_limiter": RateLimiter(
                    settings.limits.rate_limit_per_second, settings.limits.rate_limit_burst
                ),
                "followers": Followers(
                    settings.limits.max_streams_per_principal, settings.limits.max_streams
                ),
                "webhooks": Webhooks(settings.http),
                "stream_tokens": StreamTokens(
                    settings.auth.stream_token_secret,
                    settings.auth.api_key_map(),
                    settings.auth.stream_token_ttl_seconds,
                    sign_in=settings.auth.sign_in,
                ),
            }
        ),
        openapi_config=OpenAPIConfig(
            title="Threadkeeper",
            version="0.1.0",
            description=API_DESCRIPTION,
            render_plugins=openapi_render_plugins(),
            components=Components(
                security_schemes={
                    "BearerAuth": SecurityScheme(
                        type="http",
                        scheme="bearer",
                        description="An API key, or (when sign-in is configured) a JWT from "
                        "the deployment's OpenID Connect identity provider",
                    ),
                    "StreamToken": SecurityScheme(
                        type="apiKey",
                        security_scheme_in="query",
                        name=QUERY_PARAMETER,
                        description="CreateStreamToken's token; StreamRunEvents of that run only",
                    ),
                }
            ),
        ),
        # Logging is ours (app/logging.py): Litestar's default config would re-handle the root
        # and uvicorn loggers with a plain-text format.
        logging_config=None,
        debug=False,
    )
    document_errors(app)
    dedupe_security(app.openapi_schema)
    shape_types(app.openapi_schema, HealthStatus)
    # Outermost: 404/405 and every error also get the request id, metrics and (when on) a span.
    handler = observe_requests(app.asgi_handler)
    if provider is not None:
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

        handler = OpenTelemetryMiddleware(
            handler, tracer_provider=provider, exclude_spans=["receive", "send"]
        )
    app.asgi_handler = handler
    return app
