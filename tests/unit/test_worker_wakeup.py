"""The worker's claim loop never loses a wake-up that arrives while a claim round runs.

A message committed just after the round's claim query looked (so the query could not see it)
wakes the worker during the round; that wake-up must start another round at once, not wait for
the next poll (30 s here). No database: the loop's steps are replaced by recording stand-ins.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.config import WorkerSettings
from app.worker.engine import RunWorker


async def test_a_wakeup_during_a_claim_round_starts_another_round() -> None:
    settings = WorkerSettings(worker_poll_seconds=30.0, run_events_retention_seconds=0)
    worker = RunWorker(settings=settings, sessions=None, engine=None, agents=None)  # type: ignore[arg-type]
    rounds: list[float] = []
    second_round = asyncio.Event()

    async def nothing(*_: Any) -> None:
        return None

    async def claim() -> bool:
        rounds.append(asyncio.get_running_loop().time())
        if len(rounds) == 1:
            worker.notified()  # the NOTIFY of a message the claim query just missed
        else:
            second_round.set()
        return False

    worker.recover_expired = nothing  # type: ignore[method-assign]
    worker._claim_and_spawn = claim  # type: ignore[method-assign]
    worker.start()
    try:
        await asyncio.wait_for(second_round.wait(), timeout=10)
    finally:
        await worker.stop()
    assert len(rounds) >= 2
