"""The ``/metrics`` use case: read the shared-state gauges, render with the process counters."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app import metrics
from app.repositories.metrics import MetricsRepository


class MetricsService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def render(self) -> bytes:
        async with self.sessions() as session, session.begin():
            repo = MetricsRepository(session)
            runs = await repo.active_runs_by_status()
            queued = await repo.queued_requests()
        return metrics.render(runs, queued)
