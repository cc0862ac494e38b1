"""benchmarks/claims.py must keep working: a tiny run prints a row per size, old and new side by
side. Speed is not asserted here (it lives in the benchmark's output)."""

from __future__ import annotations

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_claims_benchmark_prints_both_sides(database_url: str) -> None:
    text = await run_benchmark(
        "claims.py",
        *("--sizes", "50,200", "--idle-seconds", "1", "--repeats", "2", "--queued", "3"),
        database_url=database_url,
        timeout=600,
    )
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["50", "200"], text
    # threads | before after ratio | before after ratio | before after: 12 fields each.
    assert all(len(r) == 12 for r in rows), text
