"""benchmarks/intake.py must keep working: its quick mode runs end to end and its audit passes.

Speed is not asserted here (it lives in the benchmark's output); only that every figure is
printed and that nothing was lost or duplicated.
"""

from __future__ import annotations

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_intake_benchmark_quick_mode_passes_its_audit(database_url: str) -> None:
    text = await run_benchmark(
        "intake.py",
        "--quick",
        database_url=database_url,
        timeout=1200,
    )
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
