"""The connection budget: the most PostgreSQL connections a topology (``--api N --workers M``)
can open, against what the server takes (``max_connections`` minus the reserved ones).

Per process, whatever its role (API, worker, or both in one): the repositories' SQLAlchemy pool
(``THREADKEEPER_DB_POOL_SIZE``), the checkpointer's psycopg pool
(``THREADKEEPER_CHECKPOINTER_POOL_SIZE``) and one LISTEN connection; behind a transaction pooler
the two pools go to the pooler (which multiplexes them onto its own server pool) and only the
LISTEN connection, on ``THREADKEEPER_DATABASE_DIRECT_URL``, reaches PostgreSQL itself (none
without a direct URL: those processes poll).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from app.checks.base import CheckContext, Report
from app.config import DatabaseSettings, is_loopback
from app.db.preflight import describe
from app.db.urls import parse

SERVER_LIMITS = """
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int
       + coalesce(current_setting('reserved_connections', true)::int, 0) AS reserved,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') AS in_use,
       (SELECT CASE WHEN ssl THEN version END FROM pg_stat_ssl
        WHERE pid = pg_backend_pid()) AS tls
"""


@dataclass(frozen=True)
class Budget:
    """The most connections of ``processes`` processes: to the pooler (0 without one) and to
    PostgreSQL itself."""

    processes: int
    per_process_pooled: int
    per_process_direct: int

    @property
    def pooled(self) -> int:
        return self.processes * self.per_process_pooled

    @property
    def direct(self) -> int:
        return self.processes * self.per_process_direct


def budget(db: DatabaseSettings, processes: int) -> Budget:
    pools = db.db_pool_size + db.checkpointer_pool_size
    if db.transaction_pooler:
        return Budget(processes, pools, 1 if db.database_direct_url else 0)
    return Budget(processes, 0, pools + 1)


def topology(ctx: CheckContext) -> tuple[int, int]:
    """(API processes, worker processes): as given, else one API process, plus one worker
    process when the worker does not run inside the API."""
    assert ctx.settings is not None
    api = 1 if ctx.api is None else ctx.api
    if ctx.workers is not None:
        return api, ctx.workers
    return api, 0 if ctx.settings.worker.worker_in_process else 1


async def check_connections(ctx: CheckContext, report: Report) -> None:
    assert ctx.settings is not None
    db = ctx.settings.database
    if not db.database_url:
        report.skipped("no DATABASE_URL (the embedded PostgreSQL is for one process)")
        return
    if not ctx.database_answered:
        report.skipped("the database did not answer (see above)")
        return
    api, workers = topology(ctx)
    plan = budget(db, api + workers)
    url = db.session_url or db.database_url
    conn = await asyncpg.connect(
        **parse(url).asyncpg_kwargs(application_name="threadkeeper-check", timeout=10),
        statement_cache_size=0,
    )
    try:
        async with conn.transaction():  # one server connection even through a pooler
            row = await conn.fetchrow(SERVER_LIMITS)
    finally:
        await conn.close()
    assert row is not None
    usable = int(row["max_connections"]) - int(row["reserved"])
    server = (
        f"the server at {describe(url)} takes {usable} (max_connections "
        f"{row['max_connections']} - {row['reserved']} reserved; {row['in_use']} in use now)"
    )
    who = f"{api} API + {workers} worker process(es)"
    pools = (
        f"THREADKEEPER_DB_POOL_SIZE {db.db_pool_size} + "
        f"THREADKEEPER_CHECKPOINTER_POOL_SIZE {db.checkpointer_pool_size}"
    )
    if db.transaction_pooler:
        report.ok(
            f"{who} open at most {plan.pooled} connections to the pooler ({plan.per_process_pooled} "
            f"each: {pools}): its max_client_conn must allow them, and its server pool counts "
            "against PostgreSQL's max_connections"
        )
        line = f"{plan.direct} LISTEN connection(s) on THREADKEEPER_DATABASE_DIRECT_URL; {server}"
    else:
        line = (
            f"{who} may open {plan.direct} connections ({plan.per_process_direct} each: {pools} "
            f"+ 1 LISTEN); {server}"
        )
    report_tls(
        report, url, row["tls"], through_pooler=db.transaction_pooler and url == db.database_url
    )
    if db.transaction_pooler and not db.database_direct_url:
        report.warning(
            "no THREADKEEPER_DATABASE_DIRECT_URL: LISTEN cannot go through a transaction "
            "pooler, so SSE streams and workers poll instead of being woken at once"
        )
    if plan.direct > usable:
        report.problem(
            f"{line}: too many. Lower the pool sizes, or put PgBouncer in front "
            "(THREADKEEPER_DATABASE_POOLER=transaction; docs/deploy.md#connection-budget)"
        )
    else:
        report.ok(line)


def report_tls(report: Report, url: str, tls: str | None, *, through_pooler: bool) -> None:
    """Whether this connection to PostgreSQL is encrypted (the server's own view); through a
    pooler that is the pooler's connection, so nothing is said."""
    if through_pooler:
        return
    mode = parse(url).params.get("sslmode", "prefer")
    if tls:
        report.ok(f"the connection to {describe(url)} is encrypted ({tls}, sslmode={mode})")
    elif is_loopback_url(url):
        report.ok(f"the connection to {describe(url)} is not encrypted (a loopback address)")
    else:
        report.warning(
            f"the connection to {describe(url)} is not encrypted: add ?sslmode=verify-full"
            "&sslrootcert=<the CA file> (or at least sslmode=require) to the database URL"
        )


def is_loopback_url(url: str) -> bool:
    hosts = parse(url).params.get("host", "")
    return all(h.startswith("/") or is_loopback(h) for h in hosts.split(",")) if hosts else True
