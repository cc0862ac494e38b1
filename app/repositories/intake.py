"""Intake's write, as ONE statement: lock the thread row, take both sequence numbers, insert the
user message and its queued run request.

Why one statement: PostMessage is the hot path (hundreds per second per core); the ORM version
took ten round trips (SET LOCAL, lock, idempotence probe, two sequence updates, two inserts).
Semantics are unchanged: the row is locked ``FOR UPDATE`` (the mutex shared with claim, compress,
cancel, resume and delete), waiting at most ``lock_timeout_ms``; the inserts only happen once the
lock is held, and the whole thing commits or rolls back with the caller's transaction.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.errors import NotFound
from app.repositories.locking import lock_errors_as_busy
from app.repositories.runs import WORK_CHANNEL

# The final SELECT also wakes workers in other processes (NOTIFY, delivered at commit) when the
# thread had no queued request before this one (the statement's snapshot does not see its own
# insert): only then may the thread have become claimable. A thread with a queue is picked up
# by the worker that finishes its current run, so a backlog costs no notifications.
# ``cfg`` sets the transaction-local lock_timeout (``set_config(..., true)`` is ``SET LOCAL``)
# before ``locked`` can wait: the lock is taken by LockRows on the rows the join with ``cfg``
# emits, so ``cfg`` is always evaluated first. Data-modifying CTEs run exactly once.
_ACCEPT = text(
    """
    WITH cfg AS MATERIALIZED (SELECT set_config('lock_timeout', :lock_timeout, true) AS v),
    locked AS (
        SELECT c.id FROM conversations c, cfg
        WHERE c.id = :thread_id AND c.owner_id = :owner_id AND NOT c.archived
        FOR UPDATE OF c
    ),
    conv AS (
        UPDATE conversations c
        SET next_message_seq = c.next_message_seq + 1,
            next_request_seq = c.next_request_seq + 1,
            updated_at = now()
        FROM locked WHERE c.id = locked.id
        RETURNING c.next_message_seq - 1 AS message_seq, c.next_request_seq - 1 AS request_seq
    ),
    msg AS (
        INSERT INTO messages (id, conversation_id, seq, role, content, lc_id, request_id)
        SELECT :message_id, :thread_id, conv.message_seq, 'user', :content, :lc_id, :request_id
        FROM conv
        RETURNING seq
    ),
    req AS (
        INSERT INTO agent_run_requests (id, conversation_id, seq, payload, status)
        SELECT :request_id, :thread_id, conv.request_seq, CAST(:payload AS jsonb), 'queued'
        FROM conv
        RETURNING id
    )
    SELECT msg.seq,
        CASE WHEN NOT EXISTS (
            SELECT 1 FROM agent_run_requests q
            WHERE q.conversation_id = :thread_id AND q.status = 'queued'
        ) THEN pg_notify(:work_channel, '') END AS woke
    FROM msg, req
    """
)


@dataclass(frozen=True, slots=True)
class AcceptedRow:
    request_id: uuid.UUID
    message_id: uuid.UUID
    seq: int


class IntakeRepository:
    """On a bare connection (the caller's transaction or autocommit): nothing ORM-mapped."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def accept_user_message(
        self, thread_id: uuid.UUID, owner_id: str, content: str, *, lock_timeout_ms: int
    ) -> AcceptedRow:
        """Message + queued request under the thread's row lock; NotFound for a thread the
        owner cannot see, ThreadBusy when the lock is not granted within the timeout."""
        message_id, request_id = uuid.uuid4(), uuid.uuid4()
        lc_id = f"user-{uuid.uuid4()}"
        payload = {"content": content, "message_id": str(message_id), "lc_id": lc_id}
        async with lock_errors_as_busy("the thread is locked by another operation"):
            seq = await self.conn.scalar(
                _ACCEPT,
                {
                    "lock_timeout": str(int(lock_timeout_ms)),
                    "thread_id": thread_id,
                    "owner_id": owner_id,
                    "message_id": message_id,
                    "request_id": request_id,
                    "content": content,
                    "lc_id": lc_id,
                    "payload": json.dumps(payload),
                    "work_channel": WORK_CHANNEL,
                },
            )
        if seq is None:
            raise NotFound(f"thread {thread_id} not found")
        return AcceptedRow(request_id=request_id, message_id=message_id, seq=int(seq))
