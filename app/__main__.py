"""Command line: ``python -m app serve [--migrate]``, ``worker``, ``migrate``, ``settings``,
``check [--providers] [--api N --workers M]``, ``--version``. Start-up problems (bad settings, no database) are one
line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import structlog

from app.config import Settings, WorkerSettings, load_settings, replace_settings
from app.log_redaction import secrets_of
from app.logging import configure_logging, warn_unknown_settings


def _serve(args: argparse.Namespace) -> None:
    settings = _settings()
    _check_agents(settings)  # a bad agents file is a one-line exit 2, database or not
    from app.http_server import build_server
    from app.main import create_app

    overrides: dict[str, object] = {}
    if args.migrate:
        overrides["migrate_on_start"] = True
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    if overrides:
        try:
            settings = replace_settings(settings, **overrides)
        except ValueError as exc:  # e.g. --host 0.0.0.0 with the default dev key
            print(f"threadkeeper: {exc}", file=sys.stderr)  # exc says "invalid settings: ..."
            sys.exit(2)
    # Settings refused first (exit 2), then the database (exit 1), both in one line and in seconds.
    _require_database(settings)
    app = create_app(settings)
    # uvicorn shuts down gracefully on SIGTERM and then re-raises the signal; with the default
    # action that kills the process before atexit handlers run, leaving the embedded PostgreSQL
    # (stopped by pgserver at exit) running. Exit normally instead.
    signal.signal(signal.SIGTERM, _exit_normally)
    # As uvicorn.run does: Ctrl-C/SIGINT after a graceful shutdown is no error (and must not
    # print a plain-text traceback between the JSON log lines).
    with contextlib.suppress(KeyboardInterrupt):
        build_server(app, settings.http, owns_process=True).run()


def _exit_normally(signum: int, frame: object) -> None:
    sys.exit(0)


def _migrate(_: argparse.Namespace) -> None:
    settings = _settings()
    _require_database(settings)
    from app.container import resolve_database_url
    from app.db.migrate import upgrade_head

    configure_logging(settings.logging.log_level, settings.logging.log_json, secrets_of(settings))
    db = settings.database
    # Migrations take the direct URL when DATABASE_URL goes through a transaction pooler.
    url = db.session_url or resolve_database_url(db)
    upgrade_head(url, transaction_pooler=db.transaction_pooler and not db.session_url)
    structlog.get_logger().info("migrated")


def _worker(args: argparse.Namespace) -> None:
    settings = _settings()
    if args.check:
        _check_worker(settings.worker)
    _check_agents(settings)
    _require_database(settings)
    from app import telemetry
    from app.container import build_container
    from app.heartbeat import BeatFile

    configure_logging(settings.logging.log_level, settings.logging.log_json, secrets_of(settings))
    warn_unknown_settings()
    if settings.telemetry.worker_metrics_port:
        # This process's own counters (runs, compressions, lease recoveries happen here).
        from prometheus_client import start_http_server

        start_http_server(settings.telemetry.worker_metrics_port, addr=settings.http.host)
    provider = telemetry.build_tracer_provider(settings.telemetry)

    async def main() -> None:
        # The listener wakes this worker when another process queues work; no SSE is served, so
        # it does not listen for run events.
        container = await build_container(
            settings, migrate=args.migrate, start_worker=True, serve_streams=False
        )
        from app.gc_policy import serving_gc

        serving_gc()  # the container's objects too: they live as long as the worker
        if provider is not None:
            telemetry.instrument_engine(container.engine, provider)
            telemetry.activate(provider)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        container.worker.heartbeat = BeatFile(Path(settings.worker.worker_heartbeat_file))
        structlog.get_logger().info("worker_started", holder=container.worker.holder)
        await stop.wait()
        # Graceful: no new claims, running turns get drain_seconds, the rest are handed over.
        await container.worker.drain(settings.worker.drain_seconds)
        await container.close()
        structlog.get_logger().info("worker_stopped", holder=container.worker.holder)
        telemetry.shutdown(provider)

    asyncio.run(main())


def _check_worker(settings: WorkerSettings) -> None:
    """Health check of a standalone worker: its claim loop went round within a lease period."""
    from app.heartbeat import read_beat_age

    age = read_beat_age(Path(settings.worker_heartbeat_file))
    limit = max(
        settings.lease_seconds,
        3 * settings.worker_poll_seconds,
        3 * settings.worker_idle_poll_seconds,
    )
    if age is None or age > limit:
        seen = "never" if age is None else f"{age:.1f} s ago"
        print(f"unhealthy: worker heartbeat {seen} (limit {limit:.0f} s)", file=sys.stderr)
        sys.exit(1)
    print(f"healthy: worker heartbeat {age:.1f} s ago")
    sys.exit(0)


def _require_database(settings: Settings) -> None:
    """Exit 1 with one line when the configured database does not answer within
    ``THREADKEEPER_DB_STARTUP_TIMEOUT_SECONDS`` (the embedded one starts itself later)."""
    from app.db.preflight import database_problem

    db = settings.database
    if not db.database_url:
        return
    problem = asyncio.run(database_problem(db.database_url, db.db_startup_timeout_seconds))
    if problem is not None:
        print(f"threadkeeper: {problem}", file=sys.stderr)
        sys.exit(1)


def _check(args: argparse.Namespace) -> None:
    """Exit 0 when every check passes, 2 when any found a problem (``app.checks``)."""
    import os

    from app.checks import CheckContext, run_checks

    # The findings are the output: library log lines would only interleave with them.
    configure_logging("CRITICAL", json=False)
    ctx = CheckContext(
        environ=dict(os.environ), providers=args.providers, api=args.api, workers=args.workers
    )
    sys.exit(asyncio.run(run_checks(ctx)))


def _count(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"not a number of processes: {value!r}")
    return int(value)


def _print_settings(_: argparse.Namespace) -> None:
    from app.settings_report import report

    sys.stdout.write(report(_settings()))


def app_version() -> str:
    try:
        return version("threadkeeper")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def _settings() -> Settings:
    """The settings, or a one-line refusal (exit 2) naming what is wrong."""
    try:
        return load_settings()
    except ValueError as exc:
        print(f"threadkeeper: {exc}", file=sys.stderr)
        sys.exit(2)


def _check_agents(settings: Settings) -> None:
    """The agents file (``THREADKEEPER_AGENTS_FILE``), or a one-line refusal (exit 2) naming
    the agent and the field. MCP servers are not started here: one that cannot be reached at
    start makes only its agent unavailable."""
    from app.agents.assembly import preflight
    from app.agents.spec import AgentsFileError

    try:
        preflight(settings)
    except AgentsFileError as exc:
        print(f"threadkeeper: {exc}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app", description="Threadkeeper")
    parser.add_argument("--version", action="version", version=f"threadkeeper {app_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP API (and the in-process worker)")
    serve.add_argument("--migrate", action="store_true", help="apply migrations first")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(func=_serve)
    worker = sub.add_parser("worker", help="run only the worker (deploy)")
    worker.add_argument("--migrate", action="store_true")
    worker.add_argument(
        "--check",
        action="store_true",
        help="health check: exit 0 iff the worker heartbeat is fresh",
    )
    worker.set_defaults(func=_worker)
    sub.add_parser("migrate", help="alembic upgrade head").set_defaults(func=_migrate)
    sub.add_parser(
        "settings", help="print the effective settings (secrets masked) and exit"
    ).set_defaults(func=_print_settings)
    check = sub.add_parser(
        "check",
        help="check the settings, agents, database and MCP servers before deploying "
        "(exit 0: all well, 2: a problem; one line per finding)",
    )
    check.add_argument(
        "--providers",
        action="store_true",
        help="also call each distinct model once (a one-line prompt and a short answer each)",
    )
    check.add_argument(
        "--api",
        type=_count,
        metavar="N",
        help="the connections section budgets N API processes (default 1)",
    )
    check.add_argument(
        "--workers",
        type=_count,
        metavar="M",
        help="... and M worker processes (default: 0 with the worker in the API, else 1)",
    )
    check.set_defaults(func=_check)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
