"""Clients generated from the live OpenAPI document: the generator runs, the casts a client
program must not need, and what every client program prints (tests/clients/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "clients"
BIN = Path(sys.executable).parent
#: Casts, non-null assertions and checker escapes the programs must not need, per language.
TS_CASTS = (" as ", "<any>", ": any", "!.", "!;", "!)", "@ts-")
PY_CASTS = ("cast(", "type: ignore", "Any)", "Any =")


def run(cmd: list[str], cwd: Path, timeout: float = 300, *, fails: bool = False) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    output = done.stdout + done.stderr
    assert (done.returncode != 0) == fails, f"{' '.join(cmd)} (exit {done.returncode}):\n{output}"
    return output


def no_casts(program: Path) -> None:
    text = program.read_text()
    found = [c for c in (PY_CASTS if program.suffix == ".py" else TS_CASTS) if c in text]
    assert not found, f"{program.name} uses {found}"


def assert_flow(lines: list[str]) -> None:
    """What every program prints: the final status frame, the finished run, a typed error."""
    text = "\n".join(lines)
    assert "run completed" in text or "final: completed" in text, text
    assert any(line.startswith("workdir ") and "sha256 ok" in line for line in lines), text
    assert any(line.startswith(("409: invalid_state", "409: thread_busy")) for line in lines), text
    assert any(line.startswith("compressed: ") and "1 offloaded" in line for line in lines), text
    assert any(line.startswith("422: nothing_to_compress") for line in lines), text


def generate_python_client(spec: Path, tmp_path: Path) -> str:
    """``threadkeeper_client`` in ``tmp_path``, generated from ``spec``; the generator's output."""
    config = tmp_path / "generator.yaml"
    config.write_text("post_hooks: []\n")
    return run(
        [
            str(BIN / "openapi-python-client"),
            "generate",
            "--path",
            str(spec),
            "--output-path",
            str(tmp_path / "threadkeeper_client"),
            "--meta",
            "none",
            "--config",
            str(config),
        ],
        tmp_path,
    )
