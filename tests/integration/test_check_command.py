"""``python -m app check`` (issue 30 item 3), as an operator runs it before deploying: the
settings, the agents file with every budget, the database and its schema, each MCP server's
tools, and with ``--providers`` one call per distinct model. One line per finding, exit 2 when
anything is wrong and 0 when all is well, never a traceback. And ``python -m app settings``
under the documented names."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command

from app.db.migrate import alembic_config, upgrade_head
from tests.support.agents_files import agents_file
from tests.support.database import fresh_database
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.processes import ROOT, app_run, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MCP_SERVER = ROOT / "examples" / "mcp_server.py"
LEVELS = ("ok", "warning", "problem", "skipped")


def _env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {**keep, **extra}


def findings(out: Any) -> list[tuple[str, str, str]]:
    """(level, section, text) of every line; nothing else is printed, and no traceback."""
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    rows = []
    for line in out.stdout.splitlines():
        level, _, rest = line.partition(" ")
        section, _, text = rest.strip().partition(": ")
        assert level in LEVELS and section and text, line
        rows.append((level, section, text))
    return rows


def problems(rows: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    return [(section, text) for level, section, text in rows if level == "problem"]


def test_all_well_exits_0_and_lists_each_mcp_servers_tools(clean_db: str, tmp_path: Path) -> None:
    glossary = {
        "id": "glossary",
        "model": "offline",
        "tools": ["read_workdir_file"],
        "mcp_servers": [{"name": "glossary", "command": ["python", str(MCP_SERVER)]}],
    }
    env = _env(DATABASE_URL=clean_db, THREADKEEPER_AGENTS_FILE=agents_file(tmp_path, glossary))
    out = app_run(["check"], env)
    rows = findings(out)
    assert out.returncode == 0, out.stdout
    assert problems(rows) == []
    sections = [section for _, section, _ in rows]
    assert sections[0] == "settings" and sections[-1] == "providers", sections
    assert {"agents", "database", "mcp"} <= set(sections)
    [mcp] = [text for _, section, text in rows if section == "mcp"]
    assert mcp == "agent 'glossary': MCP server 'glossary' lists 2 tool(s): glossary, term_count"
    [db] = [text for _, section, text in rows if section == "database"]
    assert "the schema is at the head" in db
    assert next(r[0] for r in rows if r[1] == "providers") == "skipped"


def test_each_problem_is_one_line_and_exits_2(tmp_path: Path) -> None:
    """An unknown variable (a typo), an unreachable database and an MCP server that cannot be
    reached: each one line naming what to fix; the other sections still run."""
    down = {
        "id": "down",
        "model": "offline",
        "mcp_servers": [{"name": "glossary", "url": f"http://127.0.0.1:{free_port()}/mcp"}],
    }
    port = free_port()
    env = _env(
        DATABASE_URL=f"postgresql://tk:secret-pw@127.0.0.1:{port}/tk",
        THREADKEEPER_DB_STARTUP_TIMEOUT_SECONDS="1",
        THREADKEEPER_SUMARY_THRESHOLD="9000",
        THREADKEEPER_AGENTS_FILE=agents_file(tmp_path, down),
    )
    out = app_run(["check"], env)
    rows = findings(out)
    assert out.returncode == 2, out.stdout
    found = problems(rows)
    assert len(found) == 3, found
    assert found[0] == (
        "settings",
        "THREADKEEPER_SUMARY_THRESHOLD is set, but no setting reads it (the default applies); "
        "did you mean THREADKEEPER_SUMMARY_THRESHOLD?",
    )
    assert found[1][0] == "database"
    assert f"127.0.0.1:{port}/tk did not answer within 1 s" in found[1][1]
    assert found[2][0] == "mcp"
    assert found[2][1].startswith("agent 'down': MCP server 'glossary' could not be reached")
    assert "secret-pw" not in out.stdout + out.stderr


def test_bad_settings_and_a_budget_that_cannot_converge(tmp_path: Path) -> None:
    tight = {"id": "tight", "model": "offline", "compression": {"summary_threshold": 900}}
    out = app_run(
        ["check"],
        _env(THREADKEEPER_AGENTS_FILE=agents_file(tmp_path, tight), DATABASE_URL="mysql://x/y"),
    )
    rows = findings(out)
    assert out.returncode == 2
    [(section, text)] = problems(rows)
    assert section == "settings" and "must be a PostgreSQL URL" in text
    assert {(level, section) for level, section, _ in rows if section != "settings"} == {
        ("skipped", s) for s in ("agents", "database", "connections", "mcp", "providers")
    }
    out = app_run(["check"], _env(THREADKEEPER_AGENTS_FILE=agents_file(tmp_path, tight)))
    rows = findings(out)
    assert out.returncode == 2
    [(section, text)] = problems(rows)
    assert section == "agents" and text.startswith("agent 'tight':"), text
    assert "leaves no room for a turn" in text and "the threshold 900" in text


@pytest.fixture
def database_one_behind(database_url: str) -> Iterator[str]:
    """A database of its own, migrated to the revision before the head."""
    with fresh_database(database_url) as url:
        upgrade_head(url)
        command.downgrade(alembic_config(url), "-1")
        yield url


def test_a_database_behind_the_head_says_how_far(database_one_behind: str) -> None:
    out = app_run(["check"], _env(DATABASE_URL=database_one_behind))
    rows = findings(out)
    assert out.returncode == 2
    [(section, text)] = problems(rows)
    assert section == "database"
    assert "is 1 revision(s) behind the head" in text and "python -m app migrate" in text


def test_providers_one_call_per_distinct_model_reported_per_agent(
    clean_db: str, tmp_path: Path
) -> None:
    with OpenAICompatibleServer(api_key="right-key") as llm:
        llm.responder = lambda request: "OK"
        base = llm.base_url
        good = {"model": "openai:gpt-test", "base_url": base, "api_key_env": "GOOD_KEY"}
        agents = [
            {"id": "good", **good},
            {"id": "twin", **good},  # the same model, endpoint and key: not called again
            {"id": "wrong-key", **good, "api_key_env": "BAD_KEY"},
            {"id": "nowhere", **good, "base_url": f"http://127.0.0.1:{free_port()}/v1"},
            {"id": "local", "model": "offline"},
        ]
        env = _env(
            DATABASE_URL=clean_db,
            THREADKEEPER_AGENTS_FILE=agents_file(tmp_path, *agents),
            GOOD_KEY="right-key",
            BAD_KEY="wrong-key-value",
        )
        out = app_run(["check", "--providers"], env)
        rows = findings(out)
        assert out.returncode == 2, out.stdout
        provider = [(level, text) for level, section, text in rows if section == "providers"]
        where = f"openai:gpt-test at 127.0.0.1:{llm.port}"
        for agent in ("good", "twin"):
            for role in ("model", "summarizer"):
                assert ("ok", f"agent {agent!r}: {role} {where} answered") in provider, provider
        assert (
            "problem",
            f"agent 'wrong-key': model {where}: HTTP 401 (invalid_api_key)",
        ) in provider
        nowhere = [t for level, t in provider if level == "problem" and "'nowhere'" in t]
        assert len(nowhere) == 2 and all("connection failed" in t for t in nowhere), nowhere
        assert not any("'local'" in t for _, t in provider)
        # One request reached the provider for good and twin (the 401 is refused before it
        # is recorded): the minimal prompt, nothing else.
        assert len(llm.requests) == 1
        assert llm.requests[0]["messages"] == [{"role": "user", "content": "Reply with OK."}]
        assert "right-key" not in out.stdout and "wrong-key-value" not in out.stdout


def test_settings_prints_the_documented_names(tmp_path: Path) -> None:
    """Issue 30: ``settings`` printed THREADKEEPER_DATABASE_URL and the deprecated
    THREADKEEPER_S3_* / THREADKEEPER_OTEL_* names instead of the ones the docs use."""
    env = _env(
        DATABASE_URL="postgresql://tk:db-password-1@db.internal:5433/tk",
        AWS_REGION="eu-west-1",
        AWS_SECRET_ACCESS_KEY="aws-secret-1",
        OTEL_SERVICE_NAME="tk-api",
        THREADKEEPER_S3_ENDPOINT_URL="http://minio:9000",  # deprecated, still honoured
    )
    out = app_run(["settings"], env)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert lines["DATABASE_URL"] == "postgresql://tk:***@db.internal:5433/tk"
    assert lines["AWS_REGION"] == "eu-west-1"
    assert lines["AWS_SECRET_ACCESS_KEY"] == "****"
    assert lines["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert lines["OTEL_SERVICE_NAME"] == "tk-api"
    assert lines["OTEL_EXPORTER_OTLP_ENDPOINT"] == ""
    assert "# THREADKEEPER_S3_ENDPOINT_URL is deprecated: set AWS_ENDPOINT_URL" in out.stdout
    for alias in ("THREADKEEPER_DATABASE_URL", "THREADKEEPER_S3_", "THREADKEEPER_OTEL_"):
        assert not any(name.startswith(alias) for name in lines), alias
    assert "db-password-1" not in out.stdout and "aws-secret-1" not in out.stdout


def describe(url: str) -> str:
    from app.db.preflight import describe as described

    return described(url)


def _usable_connections(url: str) -> int:
    import psycopg

    from app.db.urls import libpq_url

    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute(
            "SELECT current_setting('max_connections')::int"
            " - current_setting('superuser_reserved_connections')::int"
            " - coalesce(current_setting('reserved_connections', true)::int, 0)"
        ).fetchone()
        assert row is not None
        return int(row[0])


def test_the_connection_budget_of_a_topology(clean_db: str) -> None:
    """``--api N --workers M``: each process may open both pools plus one LISTEN connection;
    within the server's usable connections it is ok, past them a problem naming the fix."""
    usable = _usable_connections(clean_db)
    pools = {"THREADKEEPER_DB_POOL_SIZE": "2", "THREADKEEPER_CHECKPOINTER_POOL_SIZE": "1"}
    env = _env(DATABASE_URL=clean_db, **pools)
    out = app_run(["check", "--api", "1", "--workers", "2"], env)
    rows = findings(out)
    assert out.returncode == 0, out.stdout
    found = [(lv, t) for lv, s, t in rows if s == "connections"]
    assert (
        "ok",
        f"the connection to {describe(clean_db)} is not encrypted (a loopback address)",
    ) in found
    [(level, text)] = [(lv, t) for lv, t in found if "process(es)" in t]
    assert level == "ok"
    assert text.startswith(
        "1 API + 2 worker process(es) may open 12 connections (4 each: "
        "THREADKEEPER_DB_POOL_SIZE 2 + THREADKEEPER_CHECKPOINTER_POOL_SIZE 1 + 1 LISTEN); "
    ), text
    assert f"takes {usable} (max_connections" in text
    too_many = usable // 4 + 1  # processes of 4 connections each: one process too many
    out = app_run(["check", "--api", str(too_many), "--workers", "0"], env)
    assert out.returncode == 2, out.stdout
    [(section, text)] = problems(findings(out))
    assert section == "connections"
    assert f"may open {too_many * 4} connections" in text and "too many" in text
    assert "THREADKEEPER_DATABASE_POOLER=transaction" in text


def test_the_budget_behind_a_transaction_pooler(clean_db: str, bouncer: Any) -> None:
    """Behind PgBouncer the pools count against the pooler; only the LISTEN connections on the
    direct URL count against PostgreSQL."""
    env = _env(
        DATABASE_URL=bouncer.url(),
        THREADKEEPER_DATABASE_POOLER="transaction",
        THREADKEEPER_DATABASE_DIRECT_URL=clean_db,
    )
    out = app_run(["check", "--api", "10", "--workers", "10"], env)
    rows = findings(out)
    assert out.returncode == 0, out.stdout
    texts = [t for _, s, t in rows if s == "connections"]
    assert any(
        t.startswith(
            "10 API + 10 worker process(es) open at most 1600 connections to the pooler (80 each"
        )
        for t in texts
    ), texts
    assert any(
        t.startswith("20 LISTEN connection(s) on THREADKEEPER_DATABASE_DIRECT_URL") for t in texts
    ), texts
    # Without a direct URL nothing of ours reaches PostgreSQL directly (they poll).
    env.pop("THREADKEEPER_DATABASE_DIRECT_URL")
    out = app_run(["check", "--api", "10", "--workers", "10"], env)
    assert out.returncode == 0, out.stdout
    found = [(lv, t) for lv, s, t in findings(out) if s == "connections"]
    assert any(lv == "warning" and "SSE streams and workers poll" in t for lv, t in found), found
    assert any(t.startswith("0 LISTEN connection(s)") for _, t in found), found
    # Through the pooler the server sees the pooler's connection: nothing said about TLS.
    assert not any("encrypted" in t for _, t in found), found
