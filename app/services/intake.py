"""Intake: a user message becomes a persisted Message plus a queued run request, atomically."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.repositories.conversations import ConversationRepository
from app.repositories.messages import MessageRepository, NewMessage
from app.repositories.runs import RunRequestRepository


@dataclass(frozen=True, slots=True)
class Accepted:
    request_id: uuid.UUID
    message_id: uuid.UUID
    seq: int


class IntakeService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        lock_timeout_ms: int,
        on_enqueued: Callable[[], None] | None = None,
    ) -> None:
        self.sessions = sessions
        self.lock_timeout_ms = lock_timeout_ms
        self.on_enqueued = on_enqueued

    async def post_message(self, thread_id: uuid.UUID, owner_id: str, content: str) -> Accepted:
        """Lock the thread row (the lock compress holds too), then message + request in one commit."""
        lc_id = f"user-{uuid.uuid4()}"
        request_id = uuid.uuid4()
        async with self.sessions() as session, session.begin():
            await ConversationRepository(session).lock(
                thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms
            )
            [message] = await MessageRepository(session).append(
                thread_id,
                [NewMessage(role="user", content=content, lc_id=lc_id, request_id=request_id)],
            )
            seq = await ConversationRepository(session).allocate_request_seq(thread_id)
            request = await RunRequestRepository(session).enqueue(
                thread_id,
                seq,
                {"content": content, "message_id": str(message.id), "lc_id": lc_id},
                request_id=request_id,
            )
        if self.on_enqueued is not None:
            self.on_enqueued()
        return Accepted(request_id=request.id, message_id=message.id, seq=message.seq)
