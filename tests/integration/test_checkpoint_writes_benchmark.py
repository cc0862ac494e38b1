"""benchmarks/checkpoint_writes.py must keep working: a tiny run prints both write paths' CPU per
turn and their ratio. Speed is not asserted here (it lives in the benchmark's output)."""

from __future__ import annotations

import pytest

from tests.support.benchmarks import run_benchmark, side_by_side

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_checkpoint_writes_benchmark_prints_both_paths(database_url: str) -> None:
    text = await run_benchmark(
        "checkpoint_writes.py",
        *("--turns", "8", "--concurrency", "4", "--rounds", "2"),
        database_url=database_url,
        timeout=300,
    )
    side_by_side(
        text,
        ["a statement per row", "one statement"],
        "CPU ms/turn",
        "one statement / a statement per row",
    )
