"""``langgraph dev`` (LangGraph's own server, from ``.venv-lgref``) serving a folder's
``langgraph.json``: the reference the acceptance and ``values`` suites are checked against."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.processes import ROOT


@contextlib.contextmanager
def langgraph_dev(
    langgraph: Path, served: Path, port: int, log_path: Path, **extra: str
) -> Iterator[Any]:
    """``langgraph dev`` serving ``served/langgraph.json`` (stopped with SIGINT, as a user
    stops it); ``extra``: more environment."""
    env = {
        **os.environ,
        **extra,
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_API_KEY": "",
        "PYTHONPATH": str(ROOT),
    }
    command = [str(langgraph), "dev", "--no-browser", "--no-reload", "--port", str(port)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*command, "--config", "langgraph.json"],
            cwd=served,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
