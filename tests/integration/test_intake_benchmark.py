"""benchmarks/intake.py must keep working: its quick mode runs end to end and its audit passes.

Speed is not asserted here (it lives in the benchmark's output); only that every figure is
printed and that nothing was lost or duplicated.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


async def test_intake_benchmark_quick_mode_passes_its_audit(database_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("TEST_DATABASE_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "benchmarks" / "intake.py"),
        "--quick",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 1200)
    text = out.decode()
    assert proc.returncode == 0, text[-4000:]
    assert "AUDIT:" in text and "PASS - nothing lost or duplicated" in text, text[-4000:]
    for figure in (
        "deploy phase",
        "single phase",
        "closed c=4",
        "open 50/s c=4",
        "SQL per PostMessage (service)",
        "SQL per PostMessage (floor)",
        "accepted->started on an idle worker (deploy",
        "accepted->started on an idle worker (single",
        "CompressContext racing (deploy)",
        "CompressContext racing (single)",
    ):
        assert figure in text, (figure, text[-4000:])
