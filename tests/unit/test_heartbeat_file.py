"""The worker's heartbeat file: rewritten at most once a second, fresh while the loop turns,
stale (and so unhealthy) once it stops."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from app.heartbeat import BEAT_EVERY_SECONDS, BeatFile, read_beat_age


async def test_a_burst_of_beats_writes_once_per_second(tmp_path: Path) -> None:
    beat = BeatFile(tmp_path / "var" / "worker.heartbeat")
    assert read_beat_age(beat.path) is None  # nothing yet: unhealthy
    assert await beat.beat(holder="w", pid=1)
    first = json.loads(beat.path.read_text())
    assert first["holder"] == "w" and first["pid"] == 1
    writes = [await beat.beat(holder="w", pid=1) for _ in range(500)]
    assert not any(writes)  # the loop went round 500 times: no write
    assert json.loads(beat.path.read_text()) == first


async def test_fresh_under_load_and_stale_once_the_loop_stops(tmp_path: Path) -> None:
    beat = BeatFile(tmp_path / "worker.heartbeat")
    writes, worst_age = 0, 0.0
    deadline = time.monotonic() + 2.6
    while time.monotonic() < deadline:  # a busy claim loop: a round every millisecond
        writes += await beat.beat(holder="w", pid=1)
        worst_age = max(worst_age, read_beat_age(beat.path) or 0.0)
        await asyncio.sleep(0.001)
    assert 3 <= writes <= 4
    assert worst_age < BEAT_EVERY_SECONDS + 0.5
    await asyncio.sleep(1.2)  # the loop stopped: the age grows past the write interval
    age = read_beat_age(beat.path)
    assert age is not None and age >= 1.2
