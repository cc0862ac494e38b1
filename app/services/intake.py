"""Intake: a user message becomes a persisted Message plus a queued run request, atomically."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.repositories.intake import IntakeRepository


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
        async with self.sessions() as session:
            # The write is ONE statement, hence its own transaction: running it in autocommit
            # saves the BEGIN and COMMIT round trips (the statement commits or fails whole).
            await session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
            row = await IntakeRepository(session).accept_user_message(
                thread_id, owner_id, content, lock_timeout_ms=self.lock_timeout_ms
            )
        if self.on_enqueued is not None:
            self.on_enqueued()
        return Accepted(request_id=row.request_id, message_id=row.message_id, seq=row.seq)
