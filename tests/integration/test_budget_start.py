"""The start check of the compression budget, through the real entry point (issue 19 item 2)."""

from __future__ import annotations

import pytest

from tests.support.processes import app_run

UNREACHABLE_DB = "postgresql://nobody@127.0.0.1:1/none"


@pytest.mark.slow  # real processes
@pytest.mark.parametrize("command", [["serve"], ["worker"]])
def test_budget_that_cannot_fit_a_turn_exits_2_with_one_line(command: list[str]) -> None:
    """The issue's reproduction (threshold 3000, default keep-recent 3000) is refused before
    anything is opened (the database URL is unreachable): exit 2, one line naming the numbers."""
    env = {
        "PATH": "/usr/bin:/bin",
        "DATABASE_URL": UNREACHABLE_DB,
        "THREADKEEPER_SUMMARY_THRESHOLD": "3000",
    }
    proc = app_run(command, env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("threadkeeper: agent 'default': compression budget leaves no room")
    for number in ("keep-recent 3000", "summary 1200", "threshold 3000", "system prompt "):
        assert number in line, line
    assert "Traceback" not in proc.stderr
