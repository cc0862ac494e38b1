"""Intake: a user message becomes a persisted Message plus a queued run request, atomically."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.domain.errors import IdempotencyKeyReused
from app.repositories.conversations import ConversationRepository
from app.repositories.intake import IntakeRepository
from app.repositories.messages import MessageRepository, NewMessage
from app.repositories.runs import RunRepository, RunRequestRepository


@dataclass(frozen=True, slots=True)
class Accepted:
    request_id: uuid.UUID
    message_id: uuid.UUID
    seq: int


def body_fingerprint(content: str) -> str:
    """SHA-256 of the PostMessage body's meaning (not its bytes: key order or spacing may vary)."""
    return hashlib.sha256(json.dumps({"content": content}).encode()).hexdigest()


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

    async def post_message(
        self,
        thread_id: uuid.UUID,
        owner_id: str,
        content: str,
        *,
        idempotency_key: str | None = None,
    ) -> Accepted:
        """Lock the thread row (the lock compress holds too), then message + request in one commit.

        Without an ``idempotency_key`` (the hot path) the whole write is one statement.

        With an ``idempotency_key`` already used on this thread (looked up under the same lock,
        so two concurrent retries cannot both insert): the same body gets the first request
        back and nothing is written; another body is refused.
        """
        if idempotency_key is None:
            return await self._accept(thread_id, owner_id, content)
        lc_id = f"user-{uuid.uuid4()}"
        request_id = uuid.uuid4()
        fingerprint = body_fingerprint(content)
        async with self.sessions() as session, session.begin():
            await ConversationRepository(session).lock(
                thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms
            )
            earlier = await RunRequestRepository(session).by_idempotency_key(
                thread_id, idempotency_key
            )
            if earlier is not None:
                if earlier.idempotency_fingerprint != fingerprint:
                    raise IdempotencyKeyReused(
                        "this Idempotency-Key was used on this thread with another body"
                    )
                first = await MessageRepository(session).get(
                    uuid.UUID(earlier.payload["message_id"])
                )
                assert first is not None  # written in the same transaction as the request
                return Accepted(request_id=earlier.id, message_id=first.id, seq=first.seq)
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
                idempotency_key=idempotency_key,
                idempotency_fingerprint=fingerprint,
            )
            await RunRepository(session).announce_work()
        if self.on_enqueued is not None:
            self.on_enqueued()
        return Accepted(request_id=request.id, message_id=message.id, seq=message.seq)

    async def _accept(self, thread_id: uuid.UUID, owner_id: str, content: str) -> Accepted:
        """The hot path: lock, both sequence numbers and both inserts as ONE statement."""
        engine = self.sessions.kw["bind"]
        # One statement is its own transaction: autocommit saves the BEGIN and COMMIT round trips
        # (the statement commits or fails whole). A bare connection, no ORM Session: it has no
        # objects to track, and setting one up cost a tenth of PostMessage's CPU.
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            row = await IntakeRepository(conn).accept_user_message(
                thread_id, owner_id, content, lock_timeout_ms=self.lock_timeout_ms
            )
        if self.on_enqueued is not None:
            self.on_enqueued()
        return Accepted(request_id=row.request_id, message_id=row.message_id, seq=row.seq)
