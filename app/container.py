"""Everything the process owns (engine, checkpointer pool, graph, services, worker), built once.

Both the HTTP app and the standalone worker use it; tests build one against their database.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.agents.assembly import SummarizerOverride, build_registry
from app.agents.graph import AgentRuntime
from app.agents.registry import AgentRegistry
from app.agents.spec import load_agent_specs
from app.compression.workdir import PgIndex, Workdir, open_workdir
from app.config import DatabaseSettings, Settings
from app.db.checkpointer import BoundedPostgresSaver, check_pooled, stamp_returned
from app.db.embedded import start_embedded_postgres
from app.db.migrate import applied_revisions, head_revisions, upgrade_head
from app.db.session import (
    CHECKPOINTER_APPLICATION_NAME,
    LISTENER_APPLICATION_NAME,
    create_engine,
    create_session_factory,
)
from app.db.urls import parse
from app.repositories.agent_state import AgentStateRepository
from app.services.agent_state import AgentStateService
from app.services.branches import BranchService
from app.services.context_compression import ContextCompressionService
from app.services.intake import IntakeService
from app.services.knowledge_base import KnowledgeBaseService
from app.services.langgraph.runs import LangGraphRunService
from app.services.langgraph.stream import LangGraphStreams
from app.services.langgraph.threads import LangGraphThreadService
from app.services.run_feed import RunFeed
from app.services.runs import RunService
from app.services.threads import ThreadService
from app.services.workdir_files import WorkdirFileService
from app.worker.admission import pools_pressed
from app.worker.engine import RunWorker
from app.worker.notifier import FALLBACK_POLL_SECONDS, RunEventNotifier

log = structlog.get_logger(__name__)


def resolve_database_url(database: DatabaseSettings) -> str:
    return database.database_url or start_embedded_postgres(database.embedded_pg_dir)


@dataclass
class Container:
    settings: Settings
    database_url: str
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    pool: AsyncConnectionPool[Any]
    checkpointer: AsyncPostgresSaver
    workdir: Workdir
    #: The registered agents (GET /v1/agents) and each thread's runtime.
    agents: AgentRegistry
    threads: ThreadService
    intake: IntakeService
    runs: RunService
    feed: RunFeed
    kb: KnowledgeBaseService
    agent_state: AgentStateService
    compression: ContextCompressionService
    workdir_files: WorkdirFileService
    worker: RunWorker
    notifier: RunEventNotifier
    #: The LangGraph Agent Server API's use cases (app/services/langgraph), set after the rest.
    lg_threads: LangGraphThreadService = field(init=False)
    lg_runs: LangGraphRunService = field(init=False)
    lg_streams: LangGraphStreams = field(init=False)
    #: /v1's branches, Regenerate and Edit (issue 36).
    branches: BranchService = field(init=False)
    _closed: bool = field(default=False)
    _schema_at_head: bool = field(default=False)

    @property
    def agent(self) -> AgentRuntime:
        """The default agent's runtime (the agent of threads that name none)."""
        return self.agents.runtime(self.agents.default_id)

    async def ping(self) -> None:
        """Both ways to the database answer: the engine's pool and the checkpointer's. After an
        outage psycopg's pool reconnects on its own backoff (up to 10 s between attempts), so
        the engine can be back while agent state still answers 503: ready means both."""
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        async with self.pool.connection() as pooled:
            await pooled.execute("SELECT 1")

    async def schema_lag(self) -> str | None:
        """``None`` when the schema is at the Alembic head, else what it is at (for /ready)."""
        applied = await applied_revisions(self.engine)
        heads = head_revisions()
        if applied == heads:
            return None
        return f"schema at {','.join(sorted(applied)) or 'nothing'}, head {','.join(sorted(heads))}"

    async def schema_at_head(self) -> bool:
        """Whether the schema is at the Alembic head; once it is, remembered (migrations only move
        it forward while we run), so the check costs one query per request only until then."""
        if not self._schema_at_head:
            self._schema_at_head = await self.schema_lag() is None
        return self._schema_at_head

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # SIGTERM of an API process with the in-process worker: the same graceful drain.
        await self.worker.drain(self.settings.worker.drain_seconds)
        await self.agents.close()  # retries end, MCP server processes exit
        await self.workdir.close()
        await self.notifier.stop()
        await self.pool.close()
        await self.engine.dispose()


async def build_container(
    settings: Settings,
    *,
    database_url: str | None = None,
    summarizer: SummarizerOverride = None,
    model: Any = None,
    migrate: bool | None = None,
    start_worker: bool | None = None,
    serve_streams: bool = True,
) -> Container:
    """Wire the process. ``summarizer`` (one for all agents, or one per agent id) and ``model``
    override the configured ones (tests). ``serve_streams``: this process serves SSE, so it
    listens for run-event notifications. A bad agents file raises ``AgentsFileError`` before
    anything is opened."""
    specs = load_agent_specs(settings)
    db = settings.database
    url = database_url or resolve_database_url(db)
    pooler = db.transaction_pooler
    # Without a database URL (the embedded PostgreSQL) there is no pooler and no direct URL.
    session_url = db.session_url if db.database_url else url
    if migrate if migrate is not None else db.migrate_on_start:
        await asyncio.to_thread(
            upgrade_head, session_url or url, transaction_pooler=pooler and not session_url
        )
    engine = create_engine(
        url,
        pool_size=db.db_pool_size,
        timeout_seconds=db.db_pool_timeout_seconds,
        transaction_pooler=pooler,
    )
    sessions = create_session_factory(engine)

    # ``check``: a pooled connection killed while idle (pg_terminate_backend, a restart) is
    # discarded at checkout instead of failing the next GetAgentState / run step.
    # ``prepare_threshold``: every statement prepared at once (named ``_pg3_N``), except behind
    # a transaction pooler, where a named statement may be missing on the next transaction's
    # server connection: None sends each one unnamed, parsed and run in one round trip.
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        parse(url).conninfo(fallback_application_name=CHECKPOINTER_APPLICATION_NAME),
        min_size=1,
        max_size=db.checkpointer_pool_size,
        kwargs={
            "autocommit": True,
            "prepare_threshold": None if pooler else 0,
            "row_factory": dict_row,
            "connect_timeout": max(2, math.ceil(db.db_pool_timeout_seconds)),
        },
        check=check_pooled,
        reset=stamp_returned,
        timeout=db.db_pool_timeout_seconds,
        open=False,
    )
    await pool.open(wait=True, timeout=30)
    checkpointer = BoundedPostgresSaver(pool, acquire_timeout=db.db_pool_timeout_seconds)
    await checkpointer.setup()

    workdir = open_workdir(settings.workdir, PgIndex(sessions))
    kb = KnowledgeBaseService(sessions, engine)
    run_in_process = settings.worker.worker_in_process if start_worker is None else start_worker
    agents = await build_registry(
        specs,
        settings,
        search_kb=kb.search,
        workdir=workdir,
        checkpointer=checkpointer,
        model=model,
        summarizer=summarizer,
        base_dir=Path(settings.agent.agents_file).parent if settings.agent.agents_file else None,
        # Only a process that runs tools keeps its stdio MCP servers up between calls.
        hold_mcp_sessions=run_in_process,
    )
    worker = RunWorker(
        settings=settings.worker,
        sessions=sessions,
        engine=engine,
        agents=agents,
    )
    worker.admission.pressed = pools_pressed(engine, pool)
    notifier = RunEventNotifier(
        parse(session_url).conninfo(fallback_application_name=LISTENER_APPLICATION_NAME)
        if session_url
        else "",
        streams=serve_streams,
        on_work=worker.notified if run_in_process else None,
    )
    wake = worker.enqueued if run_in_process else None
    if run_in_process:
        worker.listening = notifier.connected
    container = Container(
        settings=settings,
        database_url=url,
        engine=engine,
        sessions=sessions,
        pool=pool,
        checkpointer=checkpointer,
        workdir=workdir,
        agents=agents,
        threads=ThreadService(
            sessions,
            db.lock_timeout_ms,
            AgentStateRepository(agents.state_graph),
            workdir,
            agents,
        ),
        intake=IntakeService(engine, db.lock_timeout_ms, on_enqueued=wake, agents=agents),
        runs=RunService(
            sessions,
            db.lock_timeout_ms,
            on_resumed=wake,
            on_cancel=worker.cancel_local if run_in_process else None,
            tools_of=agents.tools_by_name,
            require_agent=agents.require_available,
        ),
        # A quarter of the pool at most for followers' reads: a run's followers all read at
        # its next event, and interactive requests must keep connections meanwhile.
        feed=RunFeed(sessions, notifier, read_slots=max(1, settings.database.db_pool_size // 4)),
        kb=kb,
        agent_state=AgentStateService(sessions, agents),
        compression=ContextCompressionService(sessions, agents, db.lock_timeout_ms),
        workdir_files=WorkdirFileService(sessions, workdir),
        worker=worker,
        notifier=notifier,
    )
    container.lg_threads = LangGraphThreadService(
        sessions, agents, container.threads, container.agent_state
    )
    container.lg_runs = LangGraphRunService(
        sessions, container.lg_threads, container.intake, container.runs, agents
    )
    container.lg_streams = LangGraphStreams(sessions, container.feed, agents)
    container.branches = BranchService(sessions, container.intake, agents)
    if (serve_streams or run_in_process) and not session_url:
        log.warning(
            "database_notifications_off",
            reason="THREADKEEPER_DATABASE_POOLER=transaction without "
            "THREADKEEPER_DATABASE_DIRECT_URL: LISTEN needs a session of its own",
            fallback=f"streams poll every {FALLBACK_POLL_SECONDS:g} s, the worker every "
            f"{settings.worker.worker_poll_seconds:g} s",
        )
    elif serve_streams or run_in_process:
        notifier.start()
    if run_in_process:
        worker.start()
    log.info(
        "container_ready",
        worker_in_process=run_in_process,
        agents=[i.id for i in agents.infos()],
        unavailable_agents={i.id: i.unavailable_reason for i in agents.infos() if not i.available},
    )
    return container
