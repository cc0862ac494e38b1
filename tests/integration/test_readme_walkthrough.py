"""The README walkthrough, pasted as one block into bash, against a live server."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from tests.support.app_harness import API_KEY, make_settings
from tests.support.live_server import serve_in_thread

pytestmark = [pytest.mark.integration, pytest.mark.slow]

README = Path(__file__).parents[2] / "README.md"


def walkthrough() -> tuple[str, list[str]]:
    """The ``bash`` block of the Walkthrough section and the ``text`` block of its output."""
    section = README.read_text().split("## Walkthrough", 1)[1]
    script = re.search(r"```bash\n(.*?)```", section, re.S)
    expected = re.search(r"```text\n(.*?)```", section, re.S)
    assert script and expected, "README walkthrough blocks not found"
    return script.group(1), expected.group(1).strip().splitlines()


def test_readme_walkthrough_prints_the_documented_output(
    clean_db: str, tmp_path: Path, database_route: dict[str, Any]
) -> None:
    """Straight to PostgreSQL, and through PgBouncer in transaction mode."""
    script, expected = walkthrough()
    route = dict(database_route)
    url = route.pop("database_url", clean_db)
    app = create_app(make_settings(url, tmp_path / "workdir", worker_poll_seconds=0.1, **route))
    with serve_in_thread(app) as base_url:
        env = {**os.environ, "TK_URL": base_url, "TK_KEY": API_KEY}
        done = subprocess.run(
            ["bash", "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(expected), lines
    for got, want in zip(lines, expected, strict=True):
        pattern = ".*".join(re.escape(part) for part in want.split("…"))
        assert re.fullmatch(pattern, got), (got, want)
