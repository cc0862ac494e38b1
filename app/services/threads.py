"""Thread use cases: create, read, list, delete, and the persisted history."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.workdir import Workdir
from app.db.models import Conversation, Message
from app.repositories.agent_state import AgentStateRepository
from app.repositories.conversations import ConversationRepository
from app.repositories.messages import MessageRepository
from app.repositories.runs import RunRepository
from app.services.errors import ThreadBusy

log = structlog.get_logger(__name__)


class ThreadService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        lock_timeout_ms: int,
        state: AgentStateRepository | None = None,
        workdir: Workdir | None = None,
    ) -> None:
        self.sessions = sessions
        self.lock_timeout_ms = lock_timeout_ms
        self.state = state
        self.workdir = workdir

    async def create(self, *, owner_id: str, agent_id: str, title: str) -> Conversation:
        async with self.sessions() as session, session.begin():
            return await ConversationRepository(session).create(
                owner_id=owner_id, agent_id=agent_id, title=title
            )

    async def get(self, thread_id: uuid.UUID, owner_id: str) -> Conversation:
        async with self.sessions() as session:
            return await ConversationRepository(session).get_owned(thread_id, owner_id)

    async def list(
        self, owner_id: str, *, limit: int, before: tuple[datetime, uuid.UUID] | None
    ) -> Sequence[Conversation]:
        async with self.sessions() as session:
            return await ConversationRepository(session).list_owned(
                owner_id, limit=limit, before=before
            )

    async def delete(self, thread_id: uuid.UUID, owner_id: str) -> None:
        """Refused while a run is active: deleting under a running agent would lose its output."""
        async with self.sessions() as session, session.begin():
            repo = ConversationRepository(session)
            await repo.lock(thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms)
            if await RunRepository(session).active_status(thread_id) is not None:
                raise ThreadBusy("the thread has an active run; cancel it first")
            await repo.delete(thread_id)
        # The rows are gone (the thread is 404 from here on); now its model state and files.
        try:
            if self.state is not None:
                await self.state.delete_thread(thread_id)
            if self.workdir is not None:
                await self.workdir.delete_thread(str(thread_id))
        except Exception as exc:
            log.warning("thread_cleanup_failed", thread_id=str(thread_id), error=repr(exc))

    async def messages(
        self, thread_id: uuid.UUID, owner_id: str, *, after_seq: int, limit: int
    ) -> Sequence[Message]:
        async with self.sessions() as session:
            await ConversationRepository(session).get_owned(thread_id, owner_id)
            return await MessageRepository(session).list(
                thread_id, after_seq=after_seq, limit=limit
            )
