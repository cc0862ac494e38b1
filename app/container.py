"""Everything the process owns (engine, checkpointer pool, graph, services, worker), built once.

Both the HTTP app and the standalone worker use it; tests build one against their database.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

import structlog
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.agents.graph import AgentRuntime, build_agent_runtime
from app.agents.middlewares.summary import ContextCompressor
from app.agents.models import build_chat_model
from app.agents.summarizers import Summarizer, build_summarizer
from app.agents.tools import build_tools
from app.agents.workdir import Workdir, open_workdir
from app.config import DatabaseSettings, Settings
from app.db.checkpointer import BoundedPostgresSaver
from app.db.embedded import start_embedded_postgres
from app.db.migrate import applied_revisions, head_revisions, upgrade_head
from app.db.session import (
    CHECKPOINTER_APPLICATION_NAME,
    create_engine,
    create_session_factory,
)
from app.db.urls import libpq_url
from app.repositories.agent_state import AgentStateRepository
from app.services.agent_state import AgentStateService
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
from app.worker.engine import RunWorker
from app.worker.notifier import RunEventNotifier

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
    agent: AgentRuntime
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
    _closed: bool = field(default=False)
    _schema_at_head: bool = field(default=False)

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

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
        await self.workdir.close()
        await self.notifier.stop()
        await self.pool.close()
        await self.engine.dispose()


async def build_container(
    settings: Settings,
    *,
    database_url: str | None = None,
    summarizer: Summarizer | None = None,
    model: Any = None,
    migrate: bool | None = None,
    start_worker: bool | None = None,
    serve_streams: bool = True,
) -> Container:
    """Wire the process. ``summarizer``/``model`` override the configured ones (tests).
    ``serve_streams``: this process serves SSE, so it listens for run-event notifications."""
    db = settings.database
    url = database_url or resolve_database_url(db)
    if migrate if migrate is not None else db.migrate_on_start:
        await asyncio.to_thread(upgrade_head, url)
    engine = create_engine(
        url, pool_size=db.db_pool_size, timeout_seconds=db.db_pool_timeout_seconds
    )
    sessions = create_session_factory(engine)

    # ``check``: a pooled connection killed while idle (pg_terminate_backend, a restart) is
    # discarded at checkout instead of failing the next GetAgentState / run step.
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        libpq_url(url),
        min_size=1,
        max_size=db.db_pool_size,
        kwargs={
            "autocommit": True,
            "prepare_threshold": 0,
            "row_factory": dict_row,
            "application_name": CHECKPOINTER_APPLICATION_NAME,
            "connect_timeout": max(2, math.ceil(db.db_pool_timeout_seconds)),
        },
        check=AsyncConnectionPool.check_connection,
        timeout=db.db_pool_timeout_seconds,
        open=False,
    )
    await pool.open(wait=True, timeout=30)
    checkpointer = BoundedPostgresSaver(pool, acquire_timeout=db.db_pool_timeout_seconds)
    await checkpointer.setup()

    workdir = open_workdir(settings.workdir)
    summarizer = summarizer or build_summarizer(settings.models, settings.compression)
    compressor = ContextCompressor.from_settings(
        settings.compression, summarizer=summarizer, workdir=workdir
    )
    kb = KnowledgeBaseService(sessions)
    agent = build_agent_runtime(
        model=model or build_chat_model(settings.models),
        tools=build_tools(settings.web_search, kb.search, workdir),
        compressor=compressor,
        system_prompt=settings.agent.system_prompt,
        checkpointer=checkpointer,
        approval_tools=settings.agent.approval_tool_names(),
    )
    worker = RunWorker(
        settings=settings.worker,
        sessions=sessions,
        runtime=agent,
        max_concurrent_runs=settings.worker.worker_concurrency,
    )
    run_in_process = settings.worker.worker_in_process if start_worker is None else start_worker
    notifier = RunEventNotifier(
        libpq_url(url), streams=serve_streams, on_work=worker.wake if run_in_process else None
    )
    wake = worker.wake if run_in_process else None
    container = Container(
        settings=settings,
        database_url=url,
        engine=engine,
        sessions=sessions,
        pool=pool,
        checkpointer=checkpointer,
        workdir=workdir,
        agent=agent,
        threads=ThreadService(
            sessions, db.lock_timeout_ms, AgentStateRepository(agent.graph), workdir
        ),
        intake=IntakeService(engine, db.lock_timeout_ms, on_enqueued=wake),
        runs=RunService(
            sessions,
            db.lock_timeout_ms,
            on_resumed=wake,
            on_cancel=worker.cancel_local if run_in_process else None,
            tools=agent.tools,
        ),
        # A quarter of the pool at most for followers' reads: a run's followers all read at
        # its next event, and interactive requests must keep connections meanwhile.
        feed=RunFeed(sessions, notifier, read_slots=settings.database.db_pool_size // 4),
        kb=kb,
        agent_state=AgentStateService(sessions, agent),
        compression=ContextCompressionService(sessions, agent, db.lock_timeout_ms),
        workdir_files=WorkdirFileService(sessions, workdir),
        worker=worker,
        notifier=notifier,
    )
    container.lg_threads = LangGraphThreadService(
        sessions, db.lock_timeout_ms, agent, container.threads, container.agent_state
    )
    container.lg_runs = LangGraphRunService(
        sessions, db.lock_timeout_ms, container.lg_threads, container.runs, on_enqueued=wake
    )
    container.lg_streams = LangGraphStreams(sessions, container.lg_runs, container.feed)
    if serve_streams or run_in_process:
        notifier.start()
    if run_in_process:
        worker.start()
    log.info("container_ready", worker_in_process=run_in_process)
    return container
