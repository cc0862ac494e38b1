"""Counts for the scrape-time gauges of ``/metrics``."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import AgentRun, AgentRunRequest, RequestStatus, RunStatus


class MetricsRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def runs_by_status(self) -> dict[str, int]:
        """Every run status, zero-filled, so a series never disappears from a dashboard."""
        rows = await self.session.execute(
            select(AgentRun.status, func.count()).group_by(AgentRun.status)
        )
        counts: dict[str, int] = {s.value: 0 for s in RunStatus}
        for status, count in rows.all():
            counts[RunStatus(status).value] = int(count)
        return counts

    async def queued_requests(self) -> int:
        """Served by the partial index on queued requests."""
        count = await self.session.scalar(
            select(func.count())
            .select_from(AgentRunRequest)
            .where(AgentRunRequest.status == RequestStatus.QUEUED)
        )
        return int(count or 0)
