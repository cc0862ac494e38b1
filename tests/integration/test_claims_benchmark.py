"""benchmarks/claims.py must keep working: a tiny run prints a row per size, old and new side by
side. Speed is not asserted here (it lives in the benchmark's output)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


async def test_claims_benchmark_prints_both_sides(database_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("TEST_DATABASE_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "benchmarks" / "claims.py"),
        *("--sizes", "50,200", "--idle-seconds", "1", "--repeats", "2", "--queued", "3"),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 600)
    text = out.decode()
    assert proc.returncode == 0, text[-4000:]
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["50", "200"], text
    # threads | before after ratio | before after ratio | before after: 12 fields each.
    assert all(len(r) == 12 for r in rows), text
