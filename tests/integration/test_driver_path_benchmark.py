"""benchmarks/driver_path.py must keep working: a tiny run prints both paths' CPU per step write
and per knowledge-base search, and their ratios. Speed is not asserted here (it lives in the benchmark's output)."""

from __future__ import annotations

import pytest

from tests.support.benchmarks import run_benchmark, side_by_side

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_driver_path_benchmark_prints_both_paths(database_url: str) -> None:
    text = await run_benchmark(
        "driver_path.py",
        *("--writes", "40", "--concurrency", "4", "--rounds", "2"),
        database_url=database_url,
        timeout=300,
    )
    paths = ["sqlalchemy (autocommit)", "driver"]
    side_by_side(text, paths, "CPU ms/write", "driver / sqlalchemy")
    side_by_side(text, paths, "CPU ms/search", "driver / sqlalchemy")
