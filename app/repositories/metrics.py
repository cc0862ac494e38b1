"""Counts for the scrape-time gauges of ``/metrics``."""

from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import (
    ACTIVE_RUN_SQL,
    ACTIVE_RUN_STATUSES,
    QUEUED_REQUEST_SQL,
    AgentRun,
    AgentRunRequest,
    RunStatus,
)


class MetricsRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def active_runs_by_status(self) -> dict[str, int]:
        """Running and interrupted runs, zero-filled, so a series never disappears from a
        dashboard. Only these: served by the partial index of active runs, the scrape costs the
        same with 300,000 finished runs as with none (finished ones are counted as they end,
        ``app.metrics.RUNS_FINISHED``)."""
        rows = await self.session.execute(
            select(AgentRun.status, func.count())
            .where(text(ACTIVE_RUN_SQL))
            .group_by(AgentRun.status)
        )
        counts: dict[str, int] = {s.value: 0 for s in ACTIVE_RUN_STATUSES}
        for status, count in rows.all():
            counts[RunStatus(status).value] = int(count)
        return counts

    async def queued_requests(self) -> int:
        """Served by the partial index on queued requests (never reads dispatched ones)."""
        count = await self.session.scalar(
            select(func.count()).select_from(AgentRunRequest).where(text(QUEUED_REQUEST_SQL))
        )
        return int(count or 0)
