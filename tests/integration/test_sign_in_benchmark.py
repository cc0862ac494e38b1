"""benchmarks/sign_in.py must keep working: a tiny run prints a row per forgery, three columns.
Speed is not asserted here (it lives in the benchmark's output)."""

from __future__ import annotations

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_sign_in_benchmark_prints_every_forgery(database_url: str) -> None:
    text = await run_benchmark(
        "sign_in.py", "--repeats", "3", database_url=database_url, timeout=300
    )
    rows = [line for line in text.splitlines() if " x" in line and not line.startswith("{")]
    assert len(rows) == 7, text
    assert all(line.count(" x") == 3 for line in rows), text
