"""The test suite on the embedded PostgreSQL (no TEST_DATABASE_URL, no Docker), as a newcomer
runs it: a whole pytest session in a subprocess, so its exit (where pgserver stops the server
from an atexit handler) is part of what is checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: One test that builds the app (its logging on pytest's capture stream) at INFO.
TINY = """
from tests.conftest import AUTH


async def test_tiny(app_factory):
    async with app_factory(log_level="INFO", start_worker=False) as h:
        resp = await h.client.get("/v1/threads", headers=AUTH)
        assert resp.status_code == 200
"""


def test_a_session_on_the_embedded_database_ends_without_logging_errors(tmp_path: Path) -> None:
    test_file = tmp_path / "test_tiny.py"
    test_file.write_text(TINY)
    env = {k: v for k, v in os.environ.items() if k != "TEST_DATABASE_URL"}
    # No Docker either: the embedded path is the one under test, not testcontainers.
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-docker.sock"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"),
            # The suite's fixtures and settings for a file outside tests/.
            *("-p", "tests.conftest", "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml")),
            str(test_file),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "1 passed" in output
    assert "--- Logging error ---" not in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "Warning" not in output, output[-3000:]  # nor a deprecated import


def test_the_tests_that_need_server_extensions_pass_on_the_embedded_database(
    tmp_path: Path,
) -> None:
    """CI runs the suite on TEST_DATABASE_URL (a PostgreSQL with contrib); a newcomer's machine on
    the embedded one (pgserver: PostgreSQL 16 without pg_walinspect, for one). The tests marked
    ``extensions`` must pass on both, so they run here on the embedded server too."""
    env = {k: v for k, v in os.environ.items() if k != "TEST_DATABASE_URL"}
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-docker.sock"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"),
            *("-m", "extensions", "tests/"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert " passed" in output and " failed" not in output, output[-3000:]
