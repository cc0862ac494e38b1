"""benchmarks/provider_client.py must keep working: a tiny run prints both clients' CPU per call
and their ratio. Speed is not asserted here (it lives in the benchmark's output)."""

from __future__ import annotations

import re

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_provider_client_benchmark_prints_both_clients(database_url: str) -> None:
    text = await run_benchmark(
        "provider_client.py",
        *("--calls", "10", "--concurrency", "5", "--rounds", "2"),
        database_url=database_url,
        timeout=300,
    )
    medians = re.findall(
        r"^(httpx2 \(SDK default\)|aiohttp) +CPU ms/call median ([0-9.]+)", text, re.M
    )
    assert [name for name, _ in medians] == ["httpx2 (SDK default)", "aiohttp"], text
    assert all(float(value) > 0 for _, value in medians), text
    assert re.search(r"^ratio aiohttp / httpx2: [0-9.]+$", text, re.M), text
