"""Settings read once from the environment, grouped by the component that reads them.

Every knob is an environment variable named ``THREADKEEPER_<FIELD>`` (upper case), whatever
group holds it, except the database URL, which also honours the conventional ``DATABASE_URL``.
Field names are unique across groups, so a flat name (``db_pool_size``) finds its group.
Libraries that read standard variables read them themselves: the S3 Workdir backend takes
``AWS_*`` (obstore) and tracing takes ``OTEL_*`` (the OpenTelemetry SDK); the old
``THREADKEEPER_`` spellings of those still work for one release, with a logged warning
(``DEPRECATED``). The defaults below are the only ones: ``.env.example`` is checked against them
by a test. See docs/configuration.md.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from app import config_database, config_signin

#: What an API key may contain: visible ASCII, as in a bearer token.
_TOKEN = re.compile(r"[\x21-\x7e]+")
_PREFIX = "THREADKEEPER_"


class _Group(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    def _require(self, *names: str, minimum: float = 0, strict: bool = True) -> None:
        """Refuse a value that cannot work, at start, naming the variable."""
        for name in names:
            value = getattr(self, name)
            if value < minimum or (strict and value == minimum):
                op = ">" if strict else ">="
                raise ValueError(f"{_PREFIX}{name.upper()} must be {op} {minimum:g}")


class DatabaseSettings(_Group, frozen=True, kw_only=True):
    #: ``postgresql://user:pass@host:port/db``. Empty: an embedded PostgreSQL (pgserver) is started.
    database_url: str = ""
    #: Where the embedded PostgreSQL keeps its data when no database URL is given.
    embedded_pg_dir: str = "var/pgdata"
    #: ``transaction``: DATABASE_URL goes through a pooler in transaction mode (PgBouncer's
    #: ``pool_mode = transaction``): no named prepared statements, no session state across
    #: transactions, LISTEN on ``database_direct_url`` or else polling (docs/deploy.md).
    database_pooler: str = "none"
    #: With ``database_pooler=transaction``: a URL straight to PostgreSQL for what needs a
    #: session of its own (the LISTEN connection, migrations).
    database_direct_url: str = ""
    #: Most SQLAlchemy connections per process (opened on demand, then kept; more requests wait
    #: for one). See docs/deploy.md for the connection budget of a topology.
    db_pool_size: int = 40
    #: Most connections of the checkpointer's psycopg pool per process (agent state reads, each
    #: turn's checkpoint writes; one is opened at start, the rest on demand).
    checkpointer_pool_size: int = 40
    #: Wait for a database connection (connect, or a free pooled one) before a request is
    #: answered 503 ``database_unavailable``.
    db_pool_timeout_seconds: float = 10.0
    #: Lock wait for the Conversation row lock before a request is answered 409 ``thread_busy``.
    lock_timeout_ms: int = 5000
    migrate_on_start: bool = False
    #: ``serve``/``worker``/``migrate`` give up (one line on stderr, exit 1) when the database
    #: does not answer within this many seconds of starting.
    db_startup_timeout_seconds: float = 5.0

    def __post_init__(self) -> None:
        self._require(
            "db_pool_size",
            "checkpointer_pool_size",
            "db_pool_timeout_seconds",
            "lock_timeout_ms",
            "db_startup_timeout_seconds",
        )
        config_database.check(self.database_url, self.database_pooler, self.database_direct_url)

    @property
    def transaction_pooler(self) -> bool:
        return self.database_pooler == "transaction"

    @property
    def session_url(self) -> str:
        """Where a connection that keeps session state goes (LISTEN, migrations): the direct URL
        behind a transaction pooler ("" when there is none), else the database URL."""
        if self.transaction_pooler:
            return self.database_direct_url
        return self.database_url


class HttpSettings(_Group, frozen=True, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8000
    #: Idle seconds before a keep-alive connection between requests is closed.
    http_keep_alive_seconds: float = 5.0
    #: Seconds a connection may take to send a complete request head; slower ones are closed.
    http_header_timeout_seconds: float = 10.0
    #: Largest request head (request line + headers) in bytes; larger ones get 431 and are closed.
    http_max_head_bytes: int = 65_536
    #: On SIGTERM, open streams and long-polls end at once; other requests get this long to
    #: finish before their connections are cut. Then the in-process worker drains (see
    #: ``drain_seconds``): give the container a stop grace period above the sum.
    http_shutdown_timeout_seconds: float = 5.0
    #: Browser origins allowed by CORS (``https://app.example.com``, comma separated; ``*`` for
    #: any). Empty (default): no CORS headers, so browsers on other origins are refused.
    cors_origins: str = ""
    #: LangGraph run webhooks (app/api/langgraph/webhooks.py): reach private addresses?
    webhook_allow_private: bool = False
    webhook_timeout_seconds: float = 10.0
    webhook_attempts: int = 3

    def __post_init__(self) -> None:
        self._require("http_keep_alive_seconds", "http_header_timeout_seconds")
        self._require("http_max_head_bytes", "webhook_timeout_seconds", "webhook_attempts")
        self._require("http_shutdown_timeout_seconds", strict=False)
        self.cors_origin_list()

    def cors_origin_list(self) -> list[str]:
        origins = [o.strip().rstrip("/") for o in self.cors_origins.split(",") if o.strip()]
        for origin in origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(
                    "THREADKEEPER_CORS_ORIGINS entries must look like https://host[:port] or *"
                )
        return origins


class AuthSettings(_Group, frozen=True, kw_only=True):
    #: ``principal:key`` pairs, comma separated. The principal owns the threads created with the key.
    api_keys: str = "dev:dev-key"
    #: Signs stream tokens (CreateStreamToken, for browsers' EventSource). Empty: derived from
    #: ``api_keys``, so every API process with the same keys agrees and rotating keys ends them.
    stream_token_secret: str = ""
    #: Seconds a stream token may start (or resume) its run's event stream.
    stream_token_ttl_seconds: float = 300.0
    #: Sign-in (docs/sign-in.md): the OIDC issuer whose JWTs are accepted as bearer tokens,
    #: exactly as in their ``iss``. Empty: tokens are off, API keys only. Its JWKS is found
    #: through ``<issuer>/.well-known/openid-configuration``.
    auth_jwt_issuer: str = ""
    #: Required with the issuer: a token's ``aud`` must hold one of these (comma separated).
    auth_jwt_audience: str = ""
    #: The JWKS URL, instead of the one discovery names.
    auth_jwt_jwks_url: str = ""
    #: The claim naming the principal that owns threads (``sub``, ``email``, ``oid``...).
    auth_jwt_principal_claim: str = "sub"
    #: Accepted signature algorithms (comma separated); asymmetric ones only.
    auth_jwt_algorithms: str = config_signin.DEFAULT_ALGORITHMS
    #: Clock skew tolerated on ``exp``, ``nbf`` and ``iat``.
    auth_jwt_leeway_seconds: float = 30.0
    #: ``claim=value`` a token must carry (a string equal to it, a list or a space separated
    #: string containing it), e.g. ``scope=threadkeeper`` or ``realm_access.roles=tk-user``.
    auth_jwt_required_claim: str = ""
    #: The JWKS is fetched again after this long (on the next token that needs it).
    auth_jwt_jwks_cache_seconds: float = 300.0
    #: At most one fetch per this many seconds for an unknown ``kid`` or after a failed fetch.
    auth_jwt_jwks_refresh_seconds: float = 30.0
    #: Timeout of one request to the identity provider (discovery or JWKS).
    auth_jwt_timeout_seconds: float = 5.0

    def __post_init__(self) -> None:
        self.api_key_map()
        self._require(
            "stream_token_ttl_seconds", "auth_jwt_jwks_cache_seconds", "auth_jwt_timeout_seconds"
        )
        self._require("auth_jwt_leeway_seconds", "auth_jwt_jwks_refresh_seconds", strict=False)
        config_signin.check(
            issuer=self.auth_jwt_issuer,
            audience=self.auth_jwt_audience,
            jwks_url=self.auth_jwt_jwks_url,
            algorithm_list=self.auth_jwt_algorithms,
            principal_claim=self.auth_jwt_principal_claim,
            claim_rule=self.auth_jwt_required_claim,
            api_keys=self.api_key_map(),
            stream_token_secret=self.stream_token_secret,
        )

    @property
    def sign_in(self) -> bool:
        """Bearer JWTs from ``auth_jwt_issuer`` are accepted beside the API keys."""
        return bool(self.auth_jwt_issuer)

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


class LimitsSettings(_Group, frozen=True, kw_only=True):
    max_request_bytes: int = 1_048_576
    #: Per-principal token bucket on /v1 (per process: N API processes allow N times this).
    #: 0 disables it. Over the limit: 429 ``rate_limited`` with ``Retry-After``.
    rate_limit_per_second: float = 50.0
    rate_limit_burst: int = 100
    #: Open SSE event streams plus WaitRun long-polls one principal may hold in one process
    #: (429 ``too_many_streams`` beyond), and all principals together (503
    #: ``streams_unavailable`` beyond). An idle follower costs no database work, only a socket
    #: and a little memory. 0: unlimited.
    max_streams_per_principal: int = 500
    max_streams: int = 5_000

    def __post_init__(self) -> None:
        self._require("max_request_bytes")
        self._require("max_streams_per_principal", "max_streams", strict=False)
        self._require("rate_limit_per_second", strict=False)
        self._require("rate_limit_burst", minimum=1, strict=False)


class LoggingSettings(_Group, frozen=True, kw_only=True):
    log_level: str = "INFO"
    log_json: bool = True


class TelemetrySettings(_Group, frozen=True, kw_only=True):
    #: Serve Prometheus ``/metrics`` (no API key: restrict it at the network/ingress).
    metrics_enabled: bool = True
    #: ``python -m app worker`` serves its own counters on this port (0: not served).
    worker_metrics_port: int = 0
    #: Deprecated: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (read by the OpenTelemetry SDK).
    otel_endpoint: str = ""
    #: Deprecated: ``OTEL_SERVICE_NAME`` (read by the OpenTelemetry SDK).
    otel_service_name: str = ""


class WorkerSettings(_Group, frozen=True, kw_only=True):
    #: Run the worker inside the API process (default). ``false`` in deploy, where ``worker`` runs apart.
    worker_in_process: bool = True
    #: How often the claim loop looks for work while no notification can wake it (the
    #: listener is down, or another transaction held a claimable thread).
    worker_poll_seconds: float = 0.5
    #: ... and while the listener is up (NOTIFY wakes the worker): a rare, cheap safety net.
    worker_idle_poll_seconds: float = 10.0
    #: Most runs one worker process holds at once (each on a different thread). Runs mostly
    #: wait on their provider, so this is high; ``worker_max_loop_lag_ms`` decides how many the
    #: worker takes on in fact.
    worker_concurrency: int = 500
    #: Admission control: while the worker's event loop runs this late (smoothed), it claims no
    #: new run (the ones it holds go on; queued input waits in PostgreSQL or goes to another
    #: worker). 0: only ``worker_concurrency`` limits.
    worker_max_loop_lag_ms: float = 250.0
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

    def __post_init__(self) -> None:
        self._require(
            "lease_seconds",
            "heartbeat_seconds",
            "worker_poll_seconds",
            "worker_idle_poll_seconds",
            "worker_concurrency",
            "delta_flush_ms",
            "delta_flush_chars",
        )
        self._require(
            "run_events_retention_seconds", "drain_seconds", "worker_max_loop_lag_ms", strict=False
        )
        if self.heartbeat_seconds >= self.lease_seconds:
            raise ValueError(
                "THREADKEEPER_HEARTBEAT_SECONDS must be below THREADKEEPER_LEASE_SECONDS"
            )


class ModelSettings(_Group, frozen=True, kw_only=True):
    #: OpenAI-compatible endpoint. Empty: the offline extractive model and summarizer are used.
    llm_base_url: str = ""
    llm_api_key: str = ""
    llm_model: str = "gpt-4o-mini"
    llm_timeout_seconds: float = 60.0
    #: Summarizer model; empty means "same endpoint and model as the agent".
    summary_model: str = ""
    #: A call failing transiently (connection error or timeout, 429, 5xx, "overloaded") is
    #: retried this many times (Retry-After, else backoff with jitter), waiting at most
    #: ``llm_retry_max_wait_seconds`` in all; a run at most ``llm_run_max_retries`` times. Never
    #: 400/401/404 or an overflow. Six: at 20% faults 1 call in 78,125 fails (four: 1 in 3,125).
    llm_max_retries: int = 6
    llm_retry_max_wait_seconds: float = 60.0
    llm_run_max_retries: int = 12
    #: Pause between a stream's reads once it shows output, to merge chunks (0: off; <= 1).
    llm_stream_gather_seconds: float = 0.05

    def __post_init__(self) -> None:
        retries = ("llm_max_retries", "llm_retry_max_wait_seconds", "llm_run_max_retries")
        self._require(*retries, "llm_stream_gather_seconds", strict=False)
        if self.llm_stream_gather_seconds > 1:
            raise ValueError(f"{_PREFIX}LLM_STREAM_GATHER_SECONDS must be <= 1")


class AgentSettings(_Group, frozen=True, kw_only=True):
    system_prompt: str = (
        "You are Threadkeeper's assistant. Use query_kb to look things up in the knowledge base and "
        "cite result ids. Offloaded tool results can be read back with read_workdir_file "
        "and searched with search_workdir."
    )
    #: Tools that need a human approval before they run (comma separated tool names).
    approval_tools: str = ""
    #: TOML or JSON file registering the agents (see docs/agents.md). Empty: one built-in
    #: ``default`` agent made of these settings.
    agents_file: str = ""

    def approval_tool_names(self) -> frozenset[str]:
        return frozenset(t.strip() for t in self.approval_tools.split(",") if t.strip())


class CompressionSettings(_Group, frozen=True, kw_only=True):
    """Context management (DESIGN 3): the ONE threshold and what compression keeps."""

    #: Tokens of a model request (system prompt + tool schemas + messages) at which compression starts.
    summary_threshold: int = 12_000
    #: A ToolMessage larger than this (tokens) is offloaded to the Workdir and replaced by a preview.
    tool_result_preview_tokens: int = 800
    #: Recent history kept verbatim when summarizing (tokens); the current user turn is always kept.
    summary_keep_recent_tokens: int = 3_000
    #: Upper bound for the summary text itself (tokens).
    summary_max_tokens: int = 1_200
    summary_timeout_seconds: float = 60.0

    def __post_init__(self) -> None:
        self._require("summary_threshold", "tool_result_preview_tokens", "summary_max_tokens")
        self._require("summary_keep_recent_tokens", strict=False)


class WorkdirSettings(_Group, frozen=True, kw_only=True):
    workdir_root: str = "var/workdir"
    #: ``s3://bucket/prefix``: keep the Workdir in S3-compatible storage (shared by every host)
    #: instead of the local folder ``workdir_root``. Endpoint, region and credentials: the
    #: standard ``AWS_*`` variables (read by obstore), or an instance role.
    workdir_url: str = ""
    #: Deprecated: ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``,
    #: ``AWS_SECRET_ACCESS_KEY``. Still honoured (over the ``AWS_*`` ones) for one release.
    s3_endpoint_url: str = ""
    s3_region: str = ""
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""

    def __post_init__(self) -> None:
        if self.workdir_url and not self.workdir_url.startswith("s3://"):
            raise ValueError("THREADKEEPER_WORKDIR_URL must look like s3://bucket[/prefix]")

    @property
    def workdir_path(self) -> Path:
        return Path(self.workdir_root).resolve()


class WebSearchSettings(_Group, frozen=True, kw_only=True):
    #: SearxNG (``.../search``) or Tavily-compatible (``.../search`` with POST) endpoint; empty: no web_search.
    web_search_url: str = ""
    web_search_kind: str = "searxng"
    web_search_api_key: str = ""

    def __post_init__(self) -> None:
        if self.web_search_kind not in ("searxng", "tavily"):
            raise ValueError("THREADKEEPER_WEB_SEARCH_KIND must be searxng or tavily")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """The whole configuration: ``create_app``/``build_container`` hand each component its group."""

    database: DatabaseSettings = msgspec.field(default_factory=DatabaseSettings)
    http: HttpSettings = msgspec.field(default_factory=HttpSettings)
    auth: AuthSettings = msgspec.field(default_factory=AuthSettings)
    limits: LimitsSettings = msgspec.field(default_factory=LimitsSettings)
    logging: LoggingSettings = msgspec.field(default_factory=LoggingSettings)
    telemetry: TelemetrySettings = msgspec.field(default_factory=TelemetrySettings)
    worker: WorkerSettings = msgspec.field(default_factory=WorkerSettings)
    models: ModelSettings = msgspec.field(default_factory=ModelSettings)
    agent: AgentSettings = msgspec.field(default_factory=AgentSettings)
    compression: CompressionSettings = msgspec.field(default_factory=CompressionSettings)
    workdir: WorkdirSettings = msgspec.field(default_factory=WorkdirSettings)
    web_search: WebSearchSettings = msgspec.field(default_factory=WebSearchSettings)

    def __post_init__(self) -> None:
        refuse_public_dev_key(self.http, self.auth)


#: Field name -> the group holding it (names are unique across groups; checked below).
GROUP_OF: dict[str, str] = {
    field.name: group.name
    for group in msgspec.structs.fields(Settings)
    for field in msgspec.structs.fields(group.type)
}
assert len(GROUP_OF) == sum(
    len(msgspec.structs.fields(g.type)) for g in msgspec.structs.fields(Settings)
), "a setting name appears in two groups: its environment variable would be ambiguous"

#: Old variable -> the standard one a library reads; the old one works for one more release.
DEPRECATED: dict[str, str] = {
    "THREADKEEPER_OTEL_ENDPOINT": "OTEL_EXPORTER_OTLP_ENDPOINT",
    "THREADKEEPER_OTEL_SERVICE_NAME": "OTEL_SERVICE_NAME",
    "THREADKEEPER_S3_ENDPOINT_URL": "AWS_ENDPOINT_URL",
    "THREADKEEPER_S3_REGION": "AWS_REGION",
    "THREADKEEPER_S3_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
    "THREADKEEPER_S3_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
}


#: The key the README and defaults use; fine on loopback, never on a reachable address.
DEV_KEY = "dev-key"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def refuse_public_dev_key(http: HttpSettings, auth: AuthSettings) -> None:
    """Anyone who read the README knows ``dev-key``: refuse to serve it beyond loopback."""
    if not is_loopback(http.host) and DEV_KEY in auth.api_key_map():
        raise ValueError(
            f"THREADKEEPER_API_KEYS still contains the default {DEV_KEY!r} while "
            f"THREADKEEPER_HOST={http.host} is not a loopback address; set real keys"
        )


def env_name(field: str) -> str:
    return _PREFIX + field.upper()


def unknown_settings(environ: Mapping[str, str] | None = None) -> list[str]:
    """``THREADKEEPER_*`` variables no setting reads (typos, removed settings), sorted."""
    env = os.environ if environ is None else environ
    known = {env_name(name) for name in GROUP_OF}
    return sorted(k for k in env if k.startswith(_PREFIX) and k not in known)


def deprecated_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The deprecated variables that are set -> the standard variable replacing each."""
    env = os.environ if environ is None else environ
    return {old: new for old, new in DEPRECATED.items() if env.get(old)}


def _nest(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"db_pool_size": 5}`` -> ``{"database": {"db_pool_size": 5}}``."""
    nested: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        if name not in GROUP_OF:
            raise ValueError(f"invalid settings: no setting named {name!r}")
        nested.setdefault(GROUP_OF[name], {})[name] = value
    return nested


def _convert(raw: dict[str, dict[str, Any]]) -> Settings:
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except (msgspec.ValidationError, ValueError) as exc:
        raise ValueError(f"invalid settings: {exc}") from exc


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from ``THREADKEEPER_*`` variables (and ``DATABASE_URL``); ``overrides``
    (flat setting names, as in the environment) win."""
    env = os.environ if environ is None else environ
    flat: dict[str, Any] = {}
    for name in GROUP_OF:
        value = env.get(env_name(name))
        if value is not None:
            flat[name] = value
    if "database_url" not in flat and env.get("DATABASE_URL"):
        flat["database_url"] = env["DATABASE_URL"]
    flat.update(overrides)
    return _convert(_nest(flat))


def replace_settings(settings: Settings, **overrides: Any) -> Settings:
    """A copy with some settings (flat names) replaced, validated again."""
    raw = msgspec.to_builtins(settings)
    for group, values in _nest(overrides).items():
        raw[group].update(values)
    return _convert(raw)
