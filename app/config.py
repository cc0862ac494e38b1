"""Settings read once from the environment.

Every knob is an environment variable named ``THREADKEEPER_<FIELD>`` (upper case), except the
database URL, which also honours the conventional ``DATABASE_URL``. See README and ``.env.example``.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

#: What an API key may contain: visible ASCII, as in a bearer token.
_TOKEN = re.compile(r"[\x21-\x7e]+")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    # --- database -------------------------------------------------------------------------------
    #: ``postgresql://user:pass@host:port/db``. Empty: an embedded PostgreSQL (pgserver) is started.
    database_url: str = ""
    #: Where the embedded PostgreSQL keeps its data when no database URL is given.
    embedded_pg_dir: str = "var/pgdata"
    #: Most SQLAlchemy connections per process (opened on demand, then kept; more requests wait
    #: for one). The checkpointer's psycopg pool has the same maximum.
    db_pool_size: int = 40
    #: Wait for a database connection (connect, or a free pooled one) before a request is
    #: answered 503 ``database_unavailable``.
    db_pool_timeout_seconds: float = 10.0
    #: Lock wait for the Conversation row lock before a request is answered 409 ``thread_busy``.
    lock_timeout_ms: int = 5000
    migrate_on_start: bool = False

    # --- HTTP -----------------------------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = 8000
    #: ``principal:key`` pairs, comma separated. The principal owns the threads created with the key.
    api_keys: str = "dev:dev-key"
    max_request_bytes: int = 1_048_576
    #: Idle seconds before a keep-alive connection between requests is closed.
    http_keep_alive_seconds: float = 5.0
    #: Seconds a connection may take to send a complete request head; slower ones are closed.
    http_header_timeout_seconds: float = 10.0
    #: Largest request head (request line + headers) in bytes; larger ones get 431 and are closed.
    http_max_head_bytes: int = 65_536
    log_level: str = "INFO"
    log_json: bool = True
    #: Per-principal token bucket on /v1 (per process: N API processes allow N times this).
    #: 0 disables it. Over the limit: 429 ``rate_limited`` with ``Retry-After``.
    rate_limit_per_second: float = 50.0
    rate_limit_burst: int = 100

    # --- observability --------------------------------------------------------------------------
    #: Serve Prometheus ``/metrics`` (no API key: restrict it at the network/ingress).
    metrics_enabled: bool = True
    #: ``python -m app worker`` serves its own counters on this port (0: not served).
    worker_metrics_port: int = 0
    #: OTLP/HTTP base URL for traces (``OTEL_EXPORTER_OTLP_ENDPOINT`` works too). Empty: no tracing.
    otel_endpoint: str = ""
    otel_service_name: str = "threadkeeper"

    #: Browser origins allowed by CORS (``https://app.example.com``, comma separated; ``*`` for
    #: any). Empty (default): no CORS headers, so browsers on other origins are refused.
    cors_origins: str = ""

    # --- worker ---------------------------------------------------------------------------------
    #: Run the worker inside the API process (default). ``false`` in deploy, where ``worker`` runs apart.
    worker_in_process: bool = True
    worker_poll_seconds: float = 0.5
    #: Runs executed at once by one worker process (each on a different thread).
    worker_concurrency: int = 4
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 5.0
    #: On SIGTERM: seconds a worker lets running turns finish before handing the rest over.
    drain_seconds: float = 20.0
    #: Touched by the worker loop; ``python -m app worker --check`` reads it.
    worker_heartbeat_file: str = "var/worker.heartbeat"
    #: Events of a finished run (SSE replay) are deleted this long after it ended; 0 keeps them.
    run_events_retention_seconds: float = 86_400.0
    #: Streamed tokens are written as one ``delta`` event per this many ms (or chars), not per token.
    delta_flush_ms: int = 200
    delta_flush_chars: int = 2_000
    #: Tools that need a human approval before they run (comma separated tool names).
    approval_tools: str = ""

    # --- models ---------------------------------------------------------------------------------
    #: OpenAI-compatible endpoint. Empty: the offline extractive model and summarizer are used.
    llm_base_url: str = ""
    llm_api_key: str = ""
    llm_model: str = "gpt-4o-mini"
    llm_timeout_seconds: float = 60.0
    #: Summarizer model; empty means "same endpoint and model as the agent".
    summary_model: str = ""
    system_prompt: str = (
        "You are Threadkeeper's assistant. Use query_kb to look things up in the knowledge base and "
        "cite result ids. Offloaded tool results can be read back with read_workdir_file "
        "and searched with search_workdir."
    )

    # --- context management (the ONE threshold) ------------------------------------------------
    #: Tokens of a model request (system prompt + tool schemas + messages) at which compression starts.
    summary_threshold: int = 12_000
    #: A ToolMessage larger than this (tokens) is offloaded to the Workdir and replaced by a preview.
    tool_result_preview_tokens: int = 800
    #: Recent history kept verbatim when summarizing (tokens); the current user turn is always kept.
    summary_keep_recent_tokens: int = 3_000
    #: Upper bound for the summary text itself (tokens).
    summary_max_tokens: int = 1_200
    summary_timeout_seconds: float = 60.0
    workdir_root: str = "var/workdir"
    #: ``s3://bucket/prefix``: keep the Workdir in S3-compatible storage (shared by every host)
    #: instead of the local folder ``workdir_root``. Credentials: the ``s3_*`` settings, else the
    #: usual ``AWS_*`` variables.
    workdir_url: str = ""
    s3_endpoint_url: str = ""
    s3_region: str = ""
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""

    # --- tools ----------------------------------------------------------------------------------
    #: SearxNG (``.../search``) or Tavily-compatible (``.../search`` with POST) endpoint; empty: no web_search.
    web_search_url: str = ""
    web_search_kind: str = "searxng"
    web_search_api_key: str = ""
    kb_default: str = "default"

    def __post_init__(self) -> None:
        """Refuse a configuration that cannot work, at start, with the setting named."""
        positive = (
            "summary_threshold",
            "tool_result_preview_tokens",
            "summary_max_tokens",
            "lease_seconds",
            "heartbeat_seconds",
            "worker_poll_seconds",
            "worker_concurrency",
            "db_pool_size",
            "db_pool_timeout_seconds",
            "max_request_bytes",
            "lock_timeout_ms",
            "http_keep_alive_seconds",
            "http_header_timeout_seconds",
            "http_max_head_bytes",
            "delta_flush_ms",
            "delta_flush_chars",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"THREADKEEPER_{name.upper()} must be > 0")
        if self.run_events_retention_seconds < 0:
            raise ValueError("THREADKEEPER_RUN_EVENTS_RETENTION_SECONDS must be >= 0")
        if self.summary_keep_recent_tokens < 0:
            raise ValueError("THREADKEEPER_SUMMARY_KEEP_RECENT_TOKENS must be >= 0")
        if self.heartbeat_seconds >= self.lease_seconds:
            raise ValueError(
                "THREADKEEPER_HEARTBEAT_SECONDS must be below THREADKEEPER_LEASE_SECONDS"
            )
        if self.rate_limit_per_second < 0 or self.rate_limit_burst < 1:
            raise ValueError(
                "THREADKEEPER_RATE_LIMIT_PER_SECOND must be >= 0 and THREADKEEPER_RATE_LIMIT_BURST >= 1"
            )
        if self.drain_seconds < 0:
            raise ValueError("THREADKEEPER_DRAIN_SECONDS must be >= 0")
        if self.workdir_url and not self.workdir_url.startswith("s3://"):
            raise ValueError("THREADKEEPER_WORKDIR_URL must look like s3://bucket[/prefix]")
        refuse_public_dev_key(self)
        if self.web_search_kind not in ("searxng", "tavily"):
            raise ValueError("THREADKEEPER_WEB_SEARCH_KIND must be searxng or tavily")
        self.api_key_map()
        self.cors_origin_list()

    def cors_origin_list(self) -> list[str]:
        origins = [o.strip().rstrip("/") for o in self.cors_origins.split(",") if o.strip()]
        for origin in origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(
                    "THREADKEEPER_CORS_ORIGINS entries must look like https://host[:port] or *"
                )
        return origins

    def api_key_map(self) -> dict[str, str]:
        """key -> principal. A key must be presentable as a bearer token (visible ASCII) and
        name one principal: a key listed twice is refused rather than silently re-owned."""
        result: dict[str, str] = {}
        for pair in self.api_keys.split(","):
            pair = pair.strip()
            if not pair:
                continue
            principal, sep, key = pair.partition(":")
            if not sep or not principal or not key:
                raise ValueError("THREADKEEPER_API_KEYS entries must look like principal:key")
            if not _TOKEN.fullmatch(key):
                raise ValueError(
                    f"THREADKEEPER_API_KEYS: the key of principal {principal!r} must be "
                    "visible ASCII without spaces"
                )
            if key in result:
                raise ValueError(
                    f"THREADKEEPER_API_KEYS lists one key twice (principals {result[key]!r} and "
                    f"{principal!r}); every key must name exactly one principal"
                )
            result[key] = principal
        return result

    def approval_tool_names(self) -> frozenset[str]:
        return frozenset(t.strip() for t in self.approval_tools.split(",") if t.strip())

    @property
    def workdir_path(self) -> Path:
        return Path(self.workdir_root).resolve()


#: The key the README and defaults use; fine on loopback, never on a reachable address.
DEV_KEY = "dev-key"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def refuse_public_dev_key(settings: Settings) -> None:
    """Anyone who read the README knows ``dev-key``: refuse to serve it beyond loopback."""
    if not is_loopback(settings.host) and DEV_KEY in settings.api_key_map():
        raise ValueError(
            f"THREADKEEPER_API_KEYS still contains the default {DEV_KEY!r} while "
            f"THREADKEEPER_HOST={settings.host} is not a loopback address; set real keys"
        )


_PREFIX = "THREADKEEPER_"


def unknown_settings(environ: Mapping[str, str] | None = None) -> list[str]:
    """``THREADKEEPER_*`` variables no setting reads (typos, removed settings), sorted."""
    env = os.environ if environ is None else environ
    known = {_PREFIX + f.name.upper() for f in msgspec.structs.fields(Settings)}
    return sorted(k for k in env if k.startswith(_PREFIX) and k not in known)


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from ``THREADKEEPER_*`` variables (and ``DATABASE_URL``); overrides win."""
    env = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    for field in msgspec.structs.fields(Settings):
        value = env.get(_PREFIX + field.name.upper())
        if value is not None:
            raw[field.name] = value
    if "database_url" not in raw and env.get("DATABASE_URL"):
        raw["database_url"] = env["DATABASE_URL"]
    raw.update(overrides)
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except (msgspec.ValidationError, ValueError) as exc:
        raise ValueError(f"invalid settings: {exc}") from exc
