"""The three generators a frontend would use turn the live OpenAPI document into clients, and a
program running the README flow with each type-checks strictly with no cast, then runs against a
live server (issue 21): @hey-api/openapi-ts and openapi-typescript + openapi-fetch under
``tsc --strict``, openapi-python-client under ``mypy --strict``.

The programs live in tests/clients/ (hey.ts, fetch.ts, python_flow.py) with the Node packages
(package.json + package-lock.json), installed here with ``npm ci`` once per lock file into
``.cache/client-checks/<hash of the lock>`` (gitignored), so later runs reuse them.

Each error response's body is narrowed to the codes its operation declares at that status
(app/api/openapi.py), so the programs switch on ``error`` per operation; the programs in
tests/clients/must_not_compile/ use a code (or leave one out) where the operation says otherwise,
and the checker must reject exactly their lines marked ``expected: <diagnostic>``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.main import create_app
from tests.conftest import API_KEY, make_settings
from tests.support.corpus import BIG, BIG_DOC
from tests.support.live_server import serve_in_thread

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "clients"
BIN = Path(sys.executable).parent
#: Casts, non-null assertions and checker escapes the programs must not need, per language.
TS_CASTS = (" as ", "<any>", ": any", "!.", "!;", "!)", "@ts-")
PY_CASTS = ("cast(", "type: ignore", "Any)", "Any =")


NEGATIVE = CLIENTS / "must_not_compile"
#: A diagnostic of tsc (``file.ts(12,10): error TS2678: ...``) and of mypy
#: (``file.py:21: error: ...  [attr-defined]``), as (line, code).
TS_DIAGNOSTIC = re.compile(r"^[^(\s]+\((\d+),\d+\): error (TS\d+):", re.MULTILINE)
PY_DIAGNOSTIC = re.compile(r"^[^:\s]+:(\d+): error: .*\[([a-z-]+)\]$", re.MULTILINE)
EXPECTED = re.compile(r"expected: ([A-Za-z0-9-]+)")


def run(cmd: list[str], cwd: Path, timeout: float = 300, *, fails: bool = False) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    output = done.stdout + done.stderr
    assert (done.returncode != 0) == fails, f"{' '.join(cmd)} (exit {done.returncode}):\n{output}"
    return output


def expected_diagnostics(program: Path) -> set[tuple[int, str]]:
    """The (line, diagnostic code) pairs a must-not-compile program marks ``expected: <code>``."""
    lines = program.read_text().splitlines()
    found = {(n, m.group(1)) for n, line in enumerate(lines, 1) for m in EXPECTED.finditer(line)}
    assert found, f"{program.name} marks no expected diagnostic"
    return found


def assert_rejected(output: str, program: Path, pattern: re.Pattern[str]) -> None:
    """The checker failed on exactly the marked lines, each with its marked code."""
    got = {(int(line), code) for line, code in pattern.findall(output)}
    assert got == expected_diagnostics(program), output


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """``npm ci`` of tests/clients' lock file, cached by its hash (a file lock for xdist)."""
    if shutil.which("npm") is None:
        pytest.fail("npm is required (Node.js 20+) for the generated-client checks")
    lock = (CLIENTS / "package-lock.json").read_bytes()
    home = ROOT / ".cache" / "client-checks" / hashlib.sha256(lock).hexdigest()[:16]
    home.mkdir(parents=True, exist_ok=True)
    with open(home.parent / "install.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not (home / "installed").exists():
            shutil.rmtree(home / "node_modules", ignore_errors=True)
            for name in ("package.json", "package-lock.json"):
                shutil.copy(CLIENTS / name, home / name)
            run(["npm", "ci", "--no-audit", "--no-fund"], home, timeout=600)
            (home / "installed").write_text("ok")
    return home / "node_modules"


@pytest.fixture
def live(clean_db: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A live server with a knowledge-base document, and its OpenAPI document on disk."""
    import httpx

    # A large document previewed small: CompressContext offloads the knowledge-base result to
    # the Workdir, so each program reads a Workdir file and checks its hash.
    settings = make_settings(clean_db, tmp_path / "workdir", worker_poll_seconds=0.1, **BIG)
    app = create_app(settings)
    with serve_in_thread(app) as base_url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        doc = {"title": "Operations guide", "content": BIG_DOC}
        added = httpx.post(
            f"{base_url}/v1/knowledge-bases/default/documents", json=doc, headers=headers
        )
        assert added.status_code == 201, added.text
        spec = tmp_path / "openapi.json"
        spec.write_bytes(httpx.get(f"{base_url}/schema/openapi.json").content)
        yield base_url, spec


def no_casts(program: Path) -> None:
    text = program.read_text()
    found = [c for c in (PY_CASTS if program.suffix == ".py" else TS_CASTS) if c in text]
    assert not found, f"{program.name} uses {found}"


def typescript_project(tmp_path: Path, node_modules: Path, program: str) -> Path:
    project = tmp_path / "ts"
    project.mkdir()
    (project / "node_modules").symlink_to(node_modules)
    shutil.copy(CLIENTS / program, project / program)
    config = json.loads((CLIENTS / "tsconfig.json").read_text())
    (project / "tsconfig.json").write_text(json.dumps({**config, "files": [program]}))
    no_casts(project / program)
    return project


def compile_and_run(project: Path, program: str, base_url: str) -> list[str]:
    run([str(project / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.json"], project)
    script = project / "out" / program.replace(".ts", ".js")
    return run(["node", str(script), base_url, API_KEY], project).splitlines()


def assert_typescript_rejects(project: Path, program: str) -> None:
    """tsc --strict rejects tests/clients/must_not_compile/<program> against the same client."""
    negative = project / f"must_not_compile_{program}"
    shutil.copy(NEGATIVE / program, negative)
    no_casts(negative)
    config = json.loads((project / "tsconfig.json").read_text())
    (project / "tsconfig.negative.json").write_text(
        json.dumps(
            {
                **config,
                "files": [negative.name],
                "compilerOptions": {**config["compilerOptions"], "noEmit": True},
            }
        )
    )
    tsc = str(project / "node_modules" / ".bin" / "tsc")
    output = run([tsc, "-p", "tsconfig.negative.json"], project, fails=True)
    assert_rejected(output, negative, TS_DIAGNOSTIC)


WAIT_REQUEST = "/v1/requests/{request_id}/wait"
GET_REQUEST = "/v1/requests/{request_id}"


def requests_to(base_url: str) -> Counter[str]:
    """GET requests answered so far, by route template, from the live server's ``/metrics``."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    counted: Counter[str] = Counter()
    for family in text_string_to_metric_families(httpx.get(f"{base_url}/metrics").text):
        for sample in family.samples:
            if (
                sample.name == "threadkeeper_http_requests_total"
                and sample.labels["method"] == "GET"
            ):
                counted[sample.labels["route"]] += int(sample.value)
    return counted


def assert_waited_for_dispatch(base_url: str, before: Counter[str]) -> None:
    """The program waited for dispatch with WaitRequest (a long-poll), never polling GetRequest."""
    during = requests_to(base_url) - before
    assert during[WAIT_REQUEST] >= 1, during
    assert during[GET_REQUEST] == 0, during


def assert_flow(lines: list[str]) -> None:
    """What every program prints: the final status frame, the finished run, a typed error."""
    text = "\n".join(lines)
    assert "run completed" in text or "final: completed" in text, text
    assert any(line.startswith("workdir ") and "sha256 ok" in line for line in lines), text
    assert any(line.startswith(("409: invalid_state", "409: thread_busy")) for line in lines), text
    assert any(line.startswith("compressed: ") and "1 offloaded" in line for line in lines), text
    assert any(line.startswith("422: nothing_to_compress") for line in lines), text


def test_hey_api_client(live: tuple[str, Path], node_modules: Path, tmp_path: Path) -> None:
    base_url, spec = live
    project = typescript_project(tmp_path, node_modules, "hey.ts")
    output = run(
        [
            str(node_modules / ".bin" / "openapi-ts"),
            "-i",
            str(spec),
            "-o",
            "gen",
            "-c",
            "@hey-api/client-fetch",
        ],
        project,
    )
    assert "warn" not in output.lower(), output
    before = requests_to(base_url)
    lines = compile_and_run(project, "hey.ts", base_url)
    assert_waited_for_dispatch(base_url, before)
    assert_flow(lines)
    assert_typescript_rejects(project, "hey.ts")
    assert any(line.startswith("run: completed") and "3 messages" in line for line in lines), lines


def test_openapi_typescript_and_fetch(
    live: tuple[str, Path], node_modules: Path, tmp_path: Path
) -> None:
    base_url, spec = live
    project = typescript_project(tmp_path, node_modules, "fetch.ts")
    (project / "gen").mkdir()
    run([str(node_modules / ".bin" / "openapi-typescript"), str(spec), "-o", "gen/api.ts"], project)
    before = requests_to(base_url)
    lines = compile_and_run(project, "fetch.ts", base_url)
    assert_waited_for_dispatch(base_url, before)
    assert_flow(lines)
    assert_typescript_rejects(project, "fetch.ts")
    assert any(line.startswith("run: completed") and "3 messages" in line for line in lines), lines


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


def test_openapi_python_client(live: tuple[str, Path], tmp_path: Path) -> None:
    base_url, spec = live
    # The generator's output as it is: its default post-hooks run whatever ruff finds, and a
    # ruff fix turns client.py's ``*args: Any`` into ``*args: object``, which fails --strict.
    output = generate_python_client(spec, tmp_path)
    assert "Warning" not in output and "WARNING" not in output, output
    program = tmp_path / "python_flow.py"
    shutil.copy(CLIENTS / "python_flow.py", program)
    no_casts(program)
    # The program and, through its imports, the whole generated package: strict.
    run(
        [str(BIN / "mypy"), "--strict", "--no-incremental", "--config-file=", program.name],
        tmp_path,
    )
    before = requests_to(base_url)
    lines = run([sys.executable, program.name, base_url, API_KEY], tmp_path).splitlines()
    assert_waited_for_dispatch(base_url, before)
    assert_flow(lines)
    assert "messages: assistant tool assistant" in lines, lines
    assert "run: completed True" in lines, lines
    negative = tmp_path / "python_codes.py"
    shutil.copy(NEGATIVE / "python_codes.py", negative)
    no_casts(negative)
    output = run(
        [str(BIN / "mypy"), "--strict", "--no-incremental", "--config-file=", negative.name],
        tmp_path,
        fails=True,
    )
    assert_rejected(output, negative, PY_DIAGNOSTIC)
