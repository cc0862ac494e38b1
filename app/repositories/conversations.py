"""Conversation (thread) aggregate: all of its SQL, including THE per-thread row lock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import and_, delete, func, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Conversation
from app.repositories.locking import lock_errors_as_busy
from app.services.errors import NotFound


class ConversationRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def create(self, *, owner_id: str, agent_id: str, title: str) -> Conversation:
        conv = Conversation(id=uuid.uuid4(), owner_id=owner_id, agent_id=agent_id, title=title)
        self.session.add(conv)
        await self.session.flush()
        await self.session.refresh(conv)
        return conv

    async def get_owned(self, conversation_id: uuid.UUID, owner_id: str) -> Conversation:
        """Another owner's thread is indistinguishable from a missing one (404, not 403)."""
        conv = await self.session.scalar(
            select(Conversation).where(
                Conversation.id == conversation_id,
                Conversation.owner_id == owner_id,
                Conversation.archived.is_(False),
            )
        )
        if conv is None:
            raise NotFound(f"thread {conversation_id} not found")
        return conv

    async def get(self, conversation_id: uuid.UUID) -> Conversation | None:
        return await self.session.get(Conversation, conversation_id)

    async def list_owned(
        self,
        owner_id: str,
        *,
        limit: int,
        before: tuple[object, uuid.UUID] | None = None,
    ) -> Sequence[Conversation]:
        """Newest first, keyset-paginated on (created_at, id)."""
        stmt = select(Conversation).where(
            Conversation.owner_id == owner_id, Conversation.archived.is_(False)
        )
        if before is not None:
            created, cid = before
            stmt = stmt.where(
                or_(
                    Conversation.created_at < created,
                    and_(Conversation.created_at == created, Conversation.id < cid),
                )
            )
        stmt = stmt.order_by(Conversation.created_at.desc(), Conversation.id.desc()).limit(limit)
        return (await self.session.scalars(stmt)).all()

    async def lock(
        self, conversation_id: uuid.UUID, *, owner_id: str | None = None, timeout_ms: int = 5000
    ) -> Conversation:
        """``SELECT ... FOR UPDATE`` the thread row: the mutex shared by intake, claim and compress.

        Waits at most ``timeout_ms``; a lock still held then becomes ThreadBusy.
        """
        await self.session.execute(text(f"SET LOCAL lock_timeout = {int(timeout_ms)}"))
        stmt = select(Conversation).where(
            Conversation.id == conversation_id, Conversation.archived.is_(False)
        )
        if owner_id is not None:
            stmt = stmt.where(Conversation.owner_id == owner_id)
        async with lock_errors_as_busy("the thread is locked by another operation"):
            conv = await self.session.scalar(
                stmt.with_for_update().execution_options(populate_existing=True)
            )
        if conv is None:
            raise NotFound(f"thread {conversation_id} not found")
        return conv

    async def allocate_message_seqs(self, conversation_id: uuid.UUID, count: int) -> int:
        """Reserve ``count`` consecutive message sequence numbers; returns the first."""
        first = await self.session.scalar(
            update(Conversation)
            .where(Conversation.id == conversation_id)
            .values(next_message_seq=Conversation.next_message_seq + count, updated_at=func.now())
            .returning(Conversation.next_message_seq - count)
        )
        if first is None:
            raise NotFound(f"thread {conversation_id} not found")
        return int(first)

    async def allocate_request_seq(self, conversation_id: uuid.UUID) -> int:
        seq = await self.session.scalar(
            update(Conversation)
            .where(Conversation.id == conversation_id)
            .values(next_request_seq=Conversation.next_request_seq + 1)
            .returning(Conversation.next_request_seq - 1)
        )
        if seq is None:
            raise NotFound(f"thread {conversation_id} not found")
        return int(seq)

    async def delete(self, conversation_id: uuid.UUID) -> None:
        await self.session.execute(delete(Conversation).where(Conversation.id == conversation_id))
