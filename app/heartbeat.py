"""The standalone worker's heartbeat file (kept import-light: the health check runs it often)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

#: The claim loop goes round on every wake-up (hundreds a second under load); its heartbeat
#: file is rewritten at most this often. The health check's limit is a lease period or more.
BEAT_EVERY_SECONDS = 1.0


def write_beat(path: Path, text: str) -> None:
    """Atomically replace the heartbeat (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class BeatFile:
    """The heartbeat file of one process, rewritten at most every ``every`` seconds."""

    def __init__(self, path: Path, *, every: float = BEAT_EVERY_SECONDS) -> None:
        self.path = path
        self.every = every
        self._written_at = -float("inf")

    async def beat(self, **fields: object) -> bool:
        """Record ``fields`` and the time unless the last write is under ``every`` seconds old
        (the write runs off the loop); whether it wrote."""
        now = time.monotonic()
        if now - self._written_at < self.every:
            return False
        self._written_at = now
        text = json.dumps({**fields, "at": time.time()})
        await asyncio.to_thread(write_beat, self.path, text)
        return True


def read_beat_age(path: Path) -> float | None:
    """Seconds since the worker loop last went round (``None``: no readable heartbeat)."""
    try:
        beat = json.loads(path.read_text(encoding="utf-8"))
        return max(0.0, time.time() - float(beat["at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
