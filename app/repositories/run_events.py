"""A run's events (``run_events``): appended in order, read after a cursor, pruned once old."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import TERMINAL_RUN_STATUSES, AgentRun, RunEvent
from app.db.run_events import (
    CompressionEvent,
    CustomEvent,
    DeltaEvent,
    GraphStreamEvent,
    MessageAddedEvent,
    ProviderRetryEvent,
    StateEvent,
    UpdateEvent,
    event_row,
)

#: LISTEN/NOTIFY channel that wakes event streams (see app/worker/notifier.py).
RUN_EVENTS_CHANNEL = "threadkeeper_run_events"
#: The events a run's activity appends (its status events come with its status transitions).
ActivityEvent = (
    DeltaEvent
    | MessageAddedEvent
    | CompressionEvent
    | ProviderRetryEvent
    | CustomEvent
    | GraphStreamEvent
    | StateEvent
    | UpdateEvent
)


class RunEventRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def append(self, run_id: uuid.UUID, event: ActivityEvent) -> int:
        """Insert the event; listeners are notified when the surrounding transaction commits."""
        [event_id] = await self.append_many(run_id, [event])
        return event_id

    async def append_many(self, run_id: uuid.UUID, events: Sequence[ActivityEvent]) -> list[int]:
        """Insert events in order with one statement and one notification (ids ascend in order).

        ``status`` events are not taken here: the run state machine (app/repositories/
        run_leases.py) writes each with the status it reports."""
        rows = [
            RunEvent(run_id=run_id, type=type_, data=data) for type_, data in map(event_row, events)
        ]
        self.session.add_all(rows)
        await self.session.flush()
        await self.session.execute(select(func.pg_notify(RUN_EVENTS_CHANNEL, str(run_id))))
        return [int(r.id) for r in rows]

    async def prune_finished(self, *, older_than_seconds: float, limit: int) -> int:
        """Delete up to ``limit`` events of runs that ended more than ``older_than_seconds`` ago
        (completed, failed or cancelled; interrupted runs can still resume and keep theirs)."""
        finished = (
            select(RunEvent.run_id, RunEvent.id)
            .join(AgentRun, AgentRun.id == RunEvent.run_id)
            .where(
                AgentRun.status.in_(TERMINAL_RUN_STATUSES),
                AgentRun.finished_at < func.now() - timedelta(seconds=older_than_seconds),
            )
            .limit(limit)
        )
        result = await self.session.execute(
            delete(RunEvent)
            .where(tuple_(RunEvent.run_id, RunEvent.id).in_(finished))
            .returning(RunEvent.id)
        )
        return len(result.all())

    async def last_status_event(self, run_id: uuid.UUID, status: str) -> int:
        """The id of the run's latest ``status`` event with this status (0 when none)."""
        found = await self.session.scalar(
            select(func.max(RunEvent.id)).where(
                RunEvent.run_id == run_id,
                RunEvent.type == "status",
                RunEvent.data["status"].astext == status,
            )
        )
        return int(found or 0)

    async def last_state(self, run_id: uuid.UUID, upto_id: int) -> dict[str, Any] | None:
        """The graph state keys of the run's latest ``state`` event at or before ``upto_id``
        (None when there is none)."""
        found = await self.session.scalar(
            select(RunEvent.data)
            .where(RunEvent.run_id == run_id, RunEvent.type == "state", RunEvent.id <= upto_id)
            .order_by(RunEvent.id.desc())
            .limit(1)
        )
        return None if found is None else dict(found.get("values") or {})

    async def resumed_at(self, run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, datetime]:
        """Per run, when it was last resumed (runs never resumed are left out)."""
        if not run_ids:
            return {}
        rows = await self.session.execute(
            select(RunEvent.run_id, func.max(RunEvent.created_at))
            .where(
                RunEvent.run_id.in_(list(run_ids)),
                RunEvent.type == "status",
                RunEvent.data["status"].astext == "resumed",
            )
            .group_by(RunEvent.run_id)
        )
        return {run_id: at for run_id, at in rows}

    async def after(
        self, run_id: uuid.UUID, after_id: int, *, limit: int = 500
    ) -> Sequence[RunEvent]:
        return (
            await self.session.scalars(
                select(RunEvent)
                .where(RunEvent.run_id == run_id, RunEvent.id > after_id)
                .order_by(RunEvent.id)
                .limit(limit)
            )
        ).all()
