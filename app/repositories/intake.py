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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.errors import constraint_of
from app.domain.errors import NotFound
from app.repositories.locking import lock_errors_as_busy
from app.repositories.runs import WORK_CHANNEL

#: The unique index on (conversation_id, idempotency_key) (alembic 0004_i14api).
IDEMPOTENCY_KEY_INDEX = "uq_requests_conversation_idempotency_key"

# The final SELECT also wakes workers in other processes (NOTIFY, delivered at commit) when the
# thread had no queued request before this one (the statement's snapshot does not see its own
# insert): only then may the thread have become claimable. A thread with a queue is picked up
# by the worker that finishes its current run, so a backlog costs no notifications.
# ``cfg`` sets the transaction-local lock_timeout (``set_config(..., true)`` is ``SET LOCAL``)
# before ``locked`` can wait: the lock is taken by LockRows on the rows the join with ``cfg``
# emits, so ``cfg`` is always evaluated first. Data-modifying CTEs run exactly once.
# ``earlier``: a request of this thread with the same Idempotency-Key (never one with a NULL
# key: ``= NULL`` is not true). When there is one, nothing is written and the last SELECT's
# second branch returns it with its message's seq and its body's fingerprint.
# ``waiting``: with ``:supersede``, the thread's run waiting for a human answer (unless the
# thread's agent is one of ``:queueing``): then nothing is written either and the third branch
# names it; the caller supersedes it and writes the input in one transaction
# (``IntakeService``). The redundant ``IN`` lets the partial index of active runs serve.
# It begins by naming what it writes: pg_stat_activity shows only the first 1 kB of a statement,
# and operators (and tests/integration/test_faults.py) look for what it is blocked on.
_ACCEPT = text(
    """-- intake: INSERT INTO agent_run_requests (and its user message)
WITH cfg AS MATERIALIZED (SELECT set_config('lock_timeout', :lock_timeout, true) AS v),
locked AS (
    SELECT c.id, c.agent_id FROM conversations c, cfg
    WHERE c.id = :thread_id AND c.owner_id = :owner_id
    FOR UPDATE OF c
),
waiting AS (
    SELECT a.id FROM agent_runs a, locked
    WHERE :supersede AND a.conversation_id = locked.id
        AND a.status IN ('running', 'interrupted') AND a.status = 'interrupted'
        AND NOT (locked.agent_id = ANY(CAST(:queueing AS text[])))
),
earlier AS (
    SELECT r.id, r.idempotency_fingerprint, CAST(r.payload->>'message_id' AS uuid) AS message_id
    FROM agent_run_requests r, locked
    WHERE r.conversation_id = locked.id AND r.idempotency_key = :idempotency_key
),
conv AS (
    UPDATE conversations c
    SET next_message_seq = c.next_message_seq + 1,
        next_request_seq = c.next_request_seq + 1,
        updated_at = now()
    FROM locked WHERE c.id = locked.id AND NOT EXISTS (SELECT 1 FROM earlier)
        AND NOT EXISTS (SELECT 1 FROM waiting)
    RETURNING c.next_message_seq - 1 AS message_seq, c.next_request_seq - 1 AS request_seq,
        c.branch_id
),
req AS (
    INSERT INTO agent_run_requests (
        id, conversation_id, seq, payload, status, idempotency_key, idempotency_fingerprint
    )
    SELECT :request_id, :thread_id, conv.request_seq, CAST(:payload AS jsonb), 'queued',
        :idempotency_key, :fingerprint
    FROM conv
    RETURNING id
),
msg AS (
    INSERT INTO messages (id, conversation_id, seq, role, content, lc_id, request_id, branch_id)
    SELECT :message_id, :thread_id, conv.message_seq, 'user', :content, :lc_id, :request_id,
        conv.branch_id
    FROM conv
    RETURNING seq
)
SELECT req.id AS request_id, CAST(:message_id AS uuid) AS message_id, msg.seq,
    NULL AS earlier_fingerprint, false AS replayed,
    CASE WHEN NOT EXISTS (
        SELECT 1 FROM agent_run_requests q
        WHERE q.conversation_id = :thread_id AND q.status = 'queued'
    ) THEN pg_notify(:work_channel, '') END AS woke,
    NULL::uuid AS waiting_run
FROM msg, req
UNION ALL
SELECT e.id, e.message_id, m.seq, e.idempotency_fingerprint, true, NULL, NULL
FROM earlier e JOIN messages m ON m.id = e.message_id
UNION ALL
SELECT NULL, NULL, NULL, NULL, false, NULL, w.id
FROM waiting w WHERE NOT EXISTS (SELECT 1 FROM earlier)
"""
)


# A run request without a new message (Regenerate: the run answers an earlier question again),
# for a thread the caller has locked and found idle: the thread had nothing queued, so wake.
_REQUEST_ONLY = text(
    """
WITH conv AS (
    UPDATE conversations c SET next_request_seq = c.next_request_seq + 1, updated_at = now()
    WHERE c.id = :thread_id
    RETURNING c.next_request_seq - 1 AS request_seq
),
req AS (
    INSERT INTO agent_run_requests (id, conversation_id, seq, payload, status)
    SELECT :request_id, :thread_id, conv.request_seq, CAST(:payload AS jsonb), 'queued'
    FROM conv
    RETURNING id
)
SELECT req.id AS request_id, pg_notify(:work_channel, '') AS woke FROM req
"""
)


_BIND = text(
    """
WITH cfg AS MATERIALIZED (SELECT set_config('lock_timeout', :lock_timeout, true) AS v)
UPDATE conversations c SET agent_id = :agent_id, agent_bound = true
FROM cfg WHERE c.id = :id AND c.owner_id = :owner AND NOT c.agent_bound
RETURNING c.id
"""
)


@dataclass(frozen=True, slots=True)
class AcceptedRow:
    request_id: uuid.UUID
    message_id: uuid.UUID
    seq: int
    #: True when the Idempotency-Key was used before on this thread: nothing was written and
    #: this is the earlier request; ``fingerprint`` is then the earlier body's.
    replayed: bool = False
    fingerprint: str | None = None
    #: Nothing was written: this run of the thread waits for a human answer, and new input
    #: supersedes it (``supersede=True``); the caller does both in one transaction.
    waiting_run: uuid.UUID | None = None
    #: The run this input superseded (set by the use case that ended it).
    superseded: uuid.UUID | None = None


class IntakeRepository:
    """On a bare connection in autocommit (one statement is its own transaction, and the
    idempotency retry below needs the failed one rolled back): nothing ORM-mapped. Without an
    idempotency key it may also run in the caller's transaction (intake's "only if idle")."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def agent_of(self, thread_id: uuid.UUID, owner_id: str) -> str | None:
        """The agent of the owner's thread (None: no such thread for this owner)."""
        row = (
            await self.conn.execute(
                text("SELECT agent_id FROM conversations WHERE id = :id AND owner_id = :owner"),
                {"id": thread_id, "owner": owner_id},
            )
        ).first()
        return None if row is None else str(row.agent_id)

    async def binding(self, thread_id: uuid.UUID, owner_id: str) -> tuple[str, bool] | None:
        """The owner's thread's agent and whether it is chosen yet (None: no such thread)."""
        row = (
            await self.conn.execute(
                text(
                    "SELECT agent_id, agent_bound FROM conversations "
                    "WHERE id = :id AND owner_id = :owner"
                ),
                {"id": thread_id, "owner": owner_id},
            )
        ).first()
        return None if row is None else (str(row.agent_id), bool(row.agent_bound))

    async def bind_agent(
        self, thread_id: uuid.UUID, owner_id: str, agent_id: str, *, lock_timeout_ms: int
    ) -> bool:
        """Choose the agent of a thread whose agent is not chosen yet (one statement, under the
        row lock); False when it was chosen meanwhile (the caller reads which)."""
        async with lock_errors_as_busy("the thread is locked by another operation"):
            row = (
                await self.conn.execute(
                    _BIND,
                    {
                        "lock_timeout": str(int(lock_timeout_ms)),
                        "id": thread_id,
                        "owner": owner_id,
                        "agent_id": agent_id,
                    },
                )
            ).first()
        return row is not None

    async def accept_user_message(
        self,
        thread_id: uuid.UUID,
        owner_id: str,
        content: str,
        *,
        lock_timeout_ms: int,
        idempotency_key: str | None = None,
        fingerprint: str | None = None,
        lc_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
        supersede: bool = False,
        queueing: Sequence[str] = (),
    ) -> AcceptedRow:
        """Message + queued request under the thread's row lock, or (``idempotency_key`` used
        before on this thread) the earlier request, unchanged; or, with ``supersede``, nothing
        but the id of the thread's run waiting for a human answer (``waiting_run``) unless the
        thread's agent is one of ``queueing``. NotFound for a thread the owner
        cannot see, ThreadBusy when the lock is not granted within the timeout.

        Two concurrent posts with the same key: the second waits for the first's lock, but its
        statement's snapshot predates the first's commit, so ``earlier`` misses the first's
        request and the insert hits the unique index on (thread, key). The statement failed
        whole (autocommit); run once more, with a snapshot that sees the first request.
        """
        for attempt in (1, 2):
            try:
                return await self._accept(
                    thread_id,
                    owner_id,
                    content,
                    lock_timeout_ms=lock_timeout_ms,
                    idempotency_key=idempotency_key,
                    fingerprint=fingerprint,
                    lc_id=lc_id,
                    extra=extra,
                    supersede=supersede,
                    queueing=queueing,
                )
            except IntegrityError as exc:
                if attempt == 2 or constraint_of(exc) != IDEMPOTENCY_KEY_INDEX:
                    raise
        raise AssertionError("unreachable")

    async def accept_request_only(
        self,
        thread_id: uuid.UUID,
        *,
        message_id: uuid.UUID,
        message_seq: int,
        lc_id: str | None,
        extra: Mapping[str, Any],
    ) -> AcceptedRow:
        """A queued run request answering the existing message ``message_id`` again (the
        caller holds the thread's row lock, in its transaction)."""
        request_id = uuid.uuid4()
        payload = {**extra, "content": None, "message_id": str(message_id), "lc_id": lc_id}
        row = (
            await self.conn.execute(
                _REQUEST_ONLY,
                {
                    "thread_id": thread_id,
                    "request_id": request_id,
                    "payload": json.dumps(payload),
                    "work_channel": WORK_CHANNEL,
                },
            )
        ).first()
        if row is None:
            raise NotFound(f"thread {thread_id} not found")
        return AcceptedRow(request_id=row.request_id, message_id=message_id, seq=message_seq)

    async def lc_id_taken(self, thread_id: uuid.UUID, lc_id: str) -> bool:
        row = (
            await self.conn.execute(
                text("SELECT 1 FROM messages WHERE conversation_id = :id AND lc_id = :lc_id"),
                {"id": thread_id, "lc_id": lc_id},
            )
        ).first()
        return row is not None

    async def _accept(
        self,
        thread_id: uuid.UUID,
        owner_id: str,
        content: str,
        *,
        lock_timeout_ms: int,
        idempotency_key: str | None,
        fingerprint: str | None,
        lc_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
        supersede: bool = False,
        queueing: Sequence[str] = (),
    ) -> AcceptedRow:
        """``lc_id``: the user message's LangChain id (a LangGraph client may choose it);
        ``extra``: more of the request's payload (e.g. the stream modes a LangGraph run named)."""
        message_id, request_id = uuid.uuid4(), uuid.uuid4()
        lc_id = lc_id or f"user-{uuid.uuid4()}"
        payload = {
            **(extra or {}),
            "content": content,
            "message_id": str(message_id),
            "lc_id": lc_id,
        }
        async with lock_errors_as_busy("the thread is locked by another operation"):
            result = await self.conn.execute(
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
                    "idempotency_key": idempotency_key,
                    "fingerprint": fingerprint,
                    "work_channel": WORK_CHANNEL,
                    "supersede": supersede,
                    "queueing": list(queueing),
                },
            )
            row = result.first()
        if row is None:
            raise NotFound(f"thread {thread_id} not found")
        if row.waiting_run is not None:
            return AcceptedRow(
                request_id=uuid.UUID(int=0),
                message_id=uuid.UUID(int=0),
                seq=0,
                waiting_run=row.waiting_run,
            )
        return AcceptedRow(
            request_id=row.request_id,
            message_id=row.message_id,
            seq=int(row.seq),
            replayed=bool(row.replayed),
            fingerprint=row.earlier_fingerprint,
        )
