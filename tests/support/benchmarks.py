"""Running a script of benchmarks/ the way a developer does, against the test database."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def run_benchmark(script: str, *args: str, database_url: str, timeout: float) -> str:
    """``python benchmarks/<script> *args`` with ``DATABASE_URL``; its output (stdout and
    stderr), once it exited 0."""
    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("TEST_DATABASE_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "benchmarks" / script),
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    text = out.decode()
    assert proc.returncode == 0, text[-4000:]
    return text


def side_by_side(text: str, names: list[str], what: str, ratio: str) -> dict[str, float]:
    """The medians ``benchmarks.common.print_side_by_side`` printed, checked: one line per
    variant in order, each median positive, and the ratio line."""
    pattern = rf"^({'|'.join(map(re.escape, names))}) +{re.escape(what)} median ([0-9.]+)"
    medians = re.findall(pattern, text, re.M)
    assert [name for name, _ in medians] == names, text
    assert all(float(value) > 0 for _, value in medians), text
    assert re.search(rf"^ratio {re.escape(ratio)}: [0-9.]+$", text, re.M), text
    return {name: float(value) for name, value in medians}
