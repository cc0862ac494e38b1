"""The standalone worker's heartbeat file (kept import-light: the health check runs it often)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def write_beat(path: Path, text: str) -> None:
    """Atomically replace the heartbeat (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_beat_age(path: Path) -> float | None:
    """Seconds since the worker loop last went round (``None``: no readable heartbeat)."""
    try:
        beat = json.loads(path.read_text(encoding="utf-8"))
        return max(0.0, time.time() - float(beat["at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
