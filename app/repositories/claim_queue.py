"""The claim queue's SQL: which idle thread a worker takes next, and when a lease runs out.

Claims read the queue, not the threads: the heads of the per-thread FIFOs come from the partial
index of queued requests (``ix_requests_queued``), so a claim costs O(queued requests) however
many threads exist, and nothing is read while nothing is queued. Statuses are written as
literals (``ACTIVE_RUN_SQL``, ``QUEUED_REQUEST_SQL``): with bound parameters the planner could
not prove a cached generic plan covered by the partial indexes and would scan every run.

Order across threads is fair: a thread is ready when its oldest queued input arrived or when
its previous run finished, whichever is later, and the thread ready longest goes first. A thread
with a long queue therefore takes turns with the others instead of holding a worker until its
queue is empty; within a thread, requests go strictly in ``seq`` order.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import text

from app.db.driver import AnyConnection
from app.db.models import ACTIVE_RUN_SQL, QUEUED_REQUEST_SQL

# ``heads``: each thread's oldest queued request (one ordered pass over the partial index).
# ``ready``: those of idle threads, with the time each became ready; its previous run is the
# newest by (conversation_id, created_at), one index probe each (its status comes along: a
# thread whose last run completed has no dangling tool call to repair). ``picked``: the thread ready
# longest that nobody holds, its row locked (SKIP LOCKED: a thread another worker is claiming,
# or that intake/compress/cancel holds, is passed over, not waited for). The last line always
# returns one row: ``ready`` counts the candidates, so a round that found some but locked none
# (all held by others at that instant) can look again soon instead of at the next rare poll,
# and says whether runs handed back wait (the claim loop looks for them only then).
_PICK = text(
    f"""
WITH heads AS MATERIALIZED (
    SELECT DISTINCT ON (r.conversation_id) r.conversation_id, r.created_at
    FROM agent_run_requests r
    WHERE r.{QUEUED_REQUEST_SQL}
    ORDER BY r.conversation_id, r.seq
),
ready AS MATERIALIZED (
    SELECT h.conversation_id, greatest(h.created_at, prev.finished_at) AS ready_at,
        prev.status AS previous_status, prev.error_code AS previous_error
    FROM heads h
    LEFT JOIN LATERAL (
        SELECT p.finished_at, p.status, p.error_code FROM agent_runs p
        WHERE p.conversation_id = h.conversation_id
        ORDER BY p.created_at DESC
        LIMIT 1
    ) prev ON true
    WHERE NOT EXISTS (
        SELECT 1 FROM agent_runs a
        WHERE a.conversation_id = h.conversation_id AND a.{ACTIVE_RUN_SQL}
    )
),
picked AS (
    SELECT c.id, c.owner_id, c.agent_id, ready.previous_status, ready.previous_error
    FROM ready JOIN conversations c ON c.id = ready.conversation_id
    ORDER BY ready.ready_at, ready.conversation_id
    LIMIT 1
    FOR UPDATE OF c SKIP LOCKED
)
SELECT picked.id AS thread_id, picked.owner_id, picked.agent_id, picked.previous_status,
    picked.previous_error,
    (SELECT count(*) FROM ready) AS ready,
    EXISTS (
        SELECT 1 FROM agent_runs h
        WHERE h.status = 'running' AND h.lease_holder IS NULL AND h.resume_payload IS NOT NULL
    ) AS handed_back
FROM (SELECT 1) AS one LEFT JOIN picked ON true
"""
)

# Seconds until the first lease of a running run runs out (negative: already out), or NULL.
_NEXT_EXPIRY = text(
    """
SELECT EXTRACT(EPOCH FROM min(a.lease_expires_at) - now())
FROM agent_runs a
WHERE a.status = 'running' AND a.lease_holder IS NOT NULL
"""
)


@dataclass(frozen=True, slots=True)
class Picked:
    """The outcome of one look at the queue."""

    #: The thread now locked by this transaction, or None.
    thread_id: uuid.UUID | None
    owner_id: str | None
    #: The thread's agent (None with no thread).
    agent_id: str | None
    #: Idle threads with queued input seen by the look (locked or not).
    ready: int
    #: The status of the thread's latest run (None: none, or no thread).
    previous_status: str | None = None
    #: Runs handed back (resumed, or released by a draining worker) wait for a worker.
    handed_back: bool = False
    #: The error code of the thread's latest run (``superseded``: ended by new input).
    previous_error: str | None = None


class ClaimQueueRepository:
    def __init__(self, session: AnyConnection) -> None:
        self.session = session

    async def pick_thread(self) -> Picked:
        """Lock the idle thread whose queued input has been ready longest (SKIP LOCKED)."""
        row = (await self.session.execute(_PICK)).one()
        return Picked(
            row.thread_id,
            row.owner_id,
            row.agent_id,
            int(row.ready),
            None if row.previous_status is None else str(row.previous_status),
            bool(row.handed_back),
            None if row.previous_error is None else str(row.previous_error),
        )

    async def seconds_to_next_expiry(self) -> float | None:
        """When the next lease check is due; None when no run holds a lease."""
        found = await self.session.scalar(_NEXT_EXPIRY)
        return None if found is None else float(found)
