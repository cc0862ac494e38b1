"""benchmarks/providers.py must keep working: a tiny fault phase (10 threads, 0.2 s per call, 20%
transient faults, a word per streamed chunk: ``--pieces 60``) against the service in its single
layout, with one more worker process beside it (``--extra-workers``), prints its row, with every
turn completed and the provider's faults ridden out by retries; the same turns on the offline
model (``offline``) print theirs, without a provider call, and the CPU ratio of the two. Speed
is not asserted here (it lives in the benchmark's output)."""

from __future__ import annotations

import re

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROW = re.compile(
    r"^10 threads @0\.2s, 20% faults +(?P<runtime>threadkeeper\+1w|offline)"
    r" +(?P<turns_per_s>[0-9.]+) +25 +\d+% +\d+ms"
    r" +\d+ms +(?P<conns>\d+) +(?P<rss>\d+) +(?P<cpu>[0-9.]+) +(?P<gc>[0-9.]+) +(?P<failed>\d+)"
    r" +(?P<unfinished>\d+) +(?P<retries>\d+)$",
    re.M,
)


async def test_providers_benchmark_prints_a_fault_phase_ridden_out(database_url: str) -> None:
    text = await run_benchmark(
        "providers.py",
        *("--runtimes", "threadkeeper,offline", "--phases", "10@0.2/0.2"),
        *("--seconds", "4", "--drain", "60", "--extra-workers", "1", "--pieces", "60"),
        database_url=database_url,
        timeout=300,
    )
    rows = {row["runtime"]: row for row in ROW.finditer(text)}
    assert set(rows) == {"threadkeeper+1w", "offline"}, text
    for row in rows.values():
        assert float(row["turns_per_s"]) > 0
        assert int(row["conns"]) > 0 and int(row["rss"]) > 0 and float(row["cpu"]) > 0
        assert float(row["gc"]) >= 0  # the serving process's threadkeeper_gc_seconds_total
        assert int(row["failed"]) == 0 and int(row["unfinished"]) == 0
    # The provider answered faults, the service retried; offline, no provider call was made.
    assert int(rows["threadkeeper+1w"]["retries"]) > 0, text
    assert int(rows["offline"]["retries"]) == 0, text
    assert "offline: turns" in text and "'requests': 0" in text.split("offline: turns", 1)[1]
    assert re.search(r"ratio +x[0-9.]+ CPU ms/turn \(provider path / offline model\)", text), text
