"""benchmarks/provider_client.py must keep working: a tiny run prints both clients' CPU per call
and their ratio, then a chunk per event against coalesced chunks, then reads as the pieces come
against paced reads. Speed is not asserted here (it lives in the benchmark's output)."""

from __future__ import annotations

import pytest

from tests.support.benchmarks import run_benchmark, side_by_side

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_provider_client_benchmark_prints_both_clients(database_url: str) -> None:
    text = await run_benchmark(
        "provider_client.py",
        *("--calls", "10", "--concurrency", "5", "--rounds", "2", "--latency", "0.3"),
        database_url=database_url,
        timeout=300,
    )
    side_by_side(text, ["httpx2 (SDK default)", "aiohttp"], "CPU ms/call", "aiohttp / httpx2")
    side_by_side(
        text, ["a chunk per event", "coalesced"], "CPU ms/call", "coalesced / a chunk per event"
    )
    side_by_side(
        text,
        ["reads as they come", "paced reads"],
        "CPU ms/call",
        "paced reads / reads as they come",
    )
