"""Manual context compression: one synchronous request, mutually exclusive with runs and intake.

Transaction: lock the Conversation row (the lock intake and the worker's claim take) -> no
running/interrupted run and no queued request -> middleware manual path -> write the new view via
the compiled graph -> commit (releases the lock).

Atomicity: the checkpointer writes on its own psycopg connection, so the row lock gives mutual
exclusion, not a shared transaction. This is safe because compression writes nothing else: the
checkpoint write is the single durable effect and it is atomic on its own. A failure before it
(summarizer error, nothing to compress, client gone) writes nothing; Workdir files written by the
deterministic pass are content files named by tool_call_id and are harmless if unused.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.compression.outcome import record_outcome
from app.compression.summarizers import SummaryError
from app.domain.errors import (
    CompressionFailed,
    NothingToCompress,
    NotSupported,
    ThreadBusy,
    WorkdirUnavailable,
)
from app.repositories.conversations import ConversationRepository

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CompressionReport:
    before_tokens: int
    after_tokens: int
    offloaded: int
    summarized: bool


class ContextCompressionService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        agents: AgentRegistry,
        lock_timeout_ms: int,
    ) -> None:
        self.sessions = sessions
        self.agents = agents
        self.lock_timeout_ms = lock_timeout_ms

    async def compress(self, thread_id: uuid.UUID, owner_id: str) -> CompressionReport:
        async with self.sessions() as session, session.begin():
            conversations = ConversationRepository(session)
            conv = await conversations.lock(
                thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms
            )
            # The thread's own agent: its summarizer, budget, prompt and tools.
            agent = self.agents.runtime(conv.agent_id)  # AgentUnavailable: 409
            info = self.agents.info(conv.agent_id)
            if info is not None and not info.manual_compression:
                raise NotSupported(
                    f"agent {conv.agent_id!r} does not declare the manual_compression capability"
                )
            status = await conversations.status(thread_id)
            if status != "idle":
                raise ThreadBusy(f"the thread is busy ({status}); try again when it is idle")
            state = agent.state()
            snapshot = await state.get(thread_id)
            if not snapshot.messages:
                raise NothingToCompress("the thread has no model-visible history yet")
            try:
                outcome = await agent.compressor.compress(
                    snapshot.messages,
                    thread_id=str(thread_id),
                    system_message=agent.system_message,
                    tools=agent.tools,
                    force=True,
                    reason="manual",
                    require_offload=True,
                )
            except WorkdirUnavailable as exc:
                # Not "history too short": there was work to do and the Workdir refused it.
                log.warning(
                    "manual_compression_workdir_unavailable",
                    thread_id=str(thread_id),
                    reason=exc.reason,
                    failed=exc.failed,
                )
                raise
            except SummaryError as exc:
                log.warning("manual_compression_failed", thread_id=str(thread_id), error=str(exc))
                raise CompressionFailed(f"{exc}; nothing was written") from exc
            # The checkpoint goes through another connection: re-take the row lock (immediate
            # while our transaction lives) so a connection lost during the summarizer call fails
            # here, before the write, instead of writing without mutual exclusion.
            await ConversationRepository(session).lock(
                thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms
            )
            await state.replace_messages(thread_id, outcome.messages)
        try:
            await state.prune_history(thread_id)
        except Exception as exc:  # pruning is housekeeping; the compression itself succeeded
            log.warning("checkpoint_prune_failed", thread_id=str(thread_id), error=repr(exc))
        record_outcome("manual", outcome)
        log.info(
            "manual_compression",
            thread_id=str(thread_id),
            before_tokens=outcome.before_tokens,
            after_tokens=outcome.after_tokens,
            offloaded=len(outcome.offloaded),
            summarized=outcome.summarized,
        )
        return CompressionReport(
            before_tokens=outcome.before_tokens,
            after_tokens=outcome.after_tokens,
            offloaded=len(outcome.offloaded),
            summarized=outcome.summarized,
        )
