"""What one graph step of a run writes, as ONE statement (its own transaction, one round trip).

Why one statement: the ORM version of a step took a transaction of ten round trips (ping, BEGIN,
lock timeout, thread lock, lease lock, id probe, sequence update, inserts, usage, NOTIFY,
COMMIT), and a delta flush or a custom event another six each. Semantics are unchanged:

- the thread row is locked first (``FOR UPDATE``, bounded by ``lock_timeout`` via a
  transaction-local ``set_config``; lock order everywhere: thread, then run), then the run row
  (``FOR UPDATE``) **only if** this worker still holds its lease: a run recovered elsewhere or
  cancelled writes nothing at all, and the caller is told (``leased`` is false);
- messages are idempotent on their LangChain id (a retried step stores nothing twice) and take
  consecutive ``seq`` numbers from the thread row;
- token usage is added for the AI messages actually stored (a replay counts nothing);
- the events (streamed deltas, custom events, then one ``message`` event per stored message,
  in that order) go in with them, and listeners are notified when it commits.

Data-modifying CTEs run exactly once, and all of them see the same snapshot; ``lease`` gates
every write, so the statement commits whole or writes nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from app.db.driver import AnyConnection
from app.repositories.locking import lock_errors_as_busy
from app.repositories.run_events import RUN_EVENTS_CHANNEL

# The first line names what the statement writes: pg_stat_activity shows only the first 1 kB
# of a statement, and operators (and tests/integration/test_tool_call_pairing.py) look for what
# it is blocked on.
_STEP = text(
    """-- run step: INSERT INTO messages, run_events; UPDATE agent_runs, conversations
WITH cfg AS MATERIALIZED (SELECT set_config('lock_timeout', :lock_timeout, true) AS v),
conv AS MATERIALIZED (
    SELECT c.id FROM conversations c, cfg WHERE c.id = :thread_id FOR UPDATE OF c
),
lease AS MATERIALIZED (
    SELECT r.id FROM agent_runs r, conv
    WHERE r.id = :run_id AND r.lease_holder = :holder AND r.status = 'running'
    FOR UPDATE OF r
),
fresh AS MATERIALIZED (
    SELECT x.m, row_number() OVER (ORDER BY x.ord) AS n
    FROM lease, jsonb_array_elements(CAST(:messages AS jsonb)) WITH ORDINALITY AS x(m, ord)
    WHERE NOT EXISTS (
        SELECT 1 FROM messages e
        WHERE e.conversation_id = :thread_id AND e.lc_id = x.m->>'lc_id'
    )
),
seqs AS (
    UPDATE conversations c
    SET next_message_seq = c.next_message_seq + (SELECT count(*) FROM fresh), updated_at = now()
    FROM conv WHERE c.id = conv.id AND EXISTS (SELECT 1 FROM fresh)
    RETURNING c.next_message_seq - (SELECT count(*) FROM fresh) AS first, c.branch_id
),
stored AS (
    INSERT INTO messages (
        id, conversation_id, seq, role, content, lc_id, tool_calls, tool_call_id, tool_name,
        run_id, branch_id
    )
    SELECT CAST(f.m->>'id' AS uuid), :thread_id, seqs.first + f.n - 1, f.m->>'role',
        f.m->>'content', f.m->>'lc_id', NULLIF(f.m->'tool_calls', 'null'::jsonb),
        f.m->>'tool_call_id', f.m->>'tool_name', :run_id, seqs.branch_id
    FROM fresh f, seqs
    RETURNING id, seq
),
usage AS (
    UPDATE agent_runs r
    SET input_tokens = r.input_tokens + u.input_tokens,
        output_tokens = r.output_tokens + u.output_tokens,
        model_calls = r.model_calls + u.calls
    FROM lease, (
        SELECT coalesce(sum(CAST(m->>'input_tokens' AS int)), 0) AS input_tokens,
            coalesce(sum(CAST(m->>'output_tokens' AS int)), 0) AS output_tokens,
            coalesce(sum(CAST(m->>'calls' AS int)), 0) AS calls
        FROM fresh
    ) u
    WHERE r.id = lease.id AND u.calls > 0
    RETURNING r.id
),
events AS (
    INSERT INTO run_events (run_id, type, data)
    SELECT :run_id, e.type, e.data FROM (
        SELECT 0 AS part, x.ord, x.e->>'type' AS type, x.e->'data' AS data
        FROM lease, jsonb_array_elements(CAST(:events AS jsonb)) WITH ORDINALITY AS x(e, ord)
        UNION ALL
        SELECT 1, s.seq, 'message', f.m->'event' || jsonb_build_object('seq', s.seq)
        FROM stored s JOIN fresh f ON CAST(f.m->>'id' AS uuid) = s.id
    ) e
    ORDER BY e.part, e.ord
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM lease) AS leased,
    (SELECT count(*) FROM stored) AS stored,
    (SELECT count(*) FROM usage) AS counted,
    CASE WHEN EXISTS (SELECT 1 FROM events)
        THEN pg_notify(:events_channel, CAST(:run_id AS text)) END AS woke
"""
)

# A step with nothing to write (``check_lease``) only asks whether the lease is held, locking
# nothing: a row lock is a WAL record (two per check), and a lock held by a statement that writes
# nothing guards no write; a later write takes the locks and checks the lease again.
_LEASE = text(
    """-- run lease check
SELECT EXISTS (
    SELECT 1 FROM agent_runs
    WHERE id = :run_id AND lease_holder = :holder AND status = 'running'
) AS leased
"""
)


@dataclass(frozen=True, slots=True)
class StepMessage:
    """A message of the step as the statement takes it; ``event`` is its ``message`` event's
    data without ``seq`` (the statement adds the number it got)."""

    id: uuid.UUID
    role: str
    content: str
    lc_id: str | None
    event: dict[str, Any]
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    #: Token usage of an AI message (counted only if the message is stored now).
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0


@dataclass(frozen=True, slots=True)
class StepResult:
    leased: bool
    stored: int


class RunStepRepository:
    """On a bare connection in autocommit: the statement is its own transaction."""

    def __init__(self, conn: AnyConnection) -> None:
        self.conn = conn

    async def write(
        self,
        *,
        thread_id: uuid.UUID,
        run_id: uuid.UUID,
        holder: str,
        messages: Sequence[StepMessage],
        events: Sequence[tuple[str, dict[str, Any]]],
        lock_timeout_ms: int,
    ) -> StepResult:
        """Messages (idempotent on ``lc_id``), their usage and events, ``events`` (``(type,
        data)`` rows) before them, under the run's lease; nothing at all when it is not held."""
        if not messages and not events:
            found = await self.conn.execute(_LEASE, {"run_id": run_id, "holder": holder})
            return StepResult(leased=bool(found.scalar()), stored=0)
        payload = [
            {
                "id": str(m.id),
                "role": m.role,
                "content": m.content,
                "lc_id": m.lc_id,
                "tool_calls": m.tool_calls,
                "tool_call_id": m.tool_call_id,
                "tool_name": m.tool_name,
                "input_tokens": m.input_tokens,
                "output_tokens": m.output_tokens,
                "calls": m.calls,
                "event": m.event,
            }
            for m in messages
        ]
        async with lock_errors_as_busy("the thread is locked by another operation"):
            result = await self.conn.execute(
                _STEP,
                {
                    "lock_timeout": str(int(lock_timeout_ms)),
                    "thread_id": thread_id,
                    "run_id": run_id,
                    "holder": holder,
                    "messages": json.dumps(payload),
                    "events": json.dumps([{"type": t, "data": d} for t, d in events]),
                    "events_channel": RUN_EVENTS_CHANNEL,
                },
            )
            row = result.one()
        return StepResult(leased=bool(row.leased), stored=int(row.stored))
