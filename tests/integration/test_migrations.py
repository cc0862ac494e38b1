"""The one Alembic chain: upgrade on an empty database, downgrade, upgrade again, no drift."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.script import ScriptDirectory

from app.db.migrate import (
    PROJECT_ROOT,
    alembic_config,
    downgrade_base,
    head_revisions,
    upgrade_head,
)
from app.db.urls import libpq_url
from tests.support.database import fresh_database

pytestmark = pytest.mark.integration


def _tables(url: str) -> set[str]:
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {r[0] for r in rows}


def test_upgrade_downgrade_upgrade_and_models_match(database_url: str) -> None:
    server = database_url  # same server; a database of its own for this test
    with fresh_database(server) as url:
        upgrade_head(url)
        expected = {
            "conversations",
            "messages",
            "agent_run_requests",
            "agent_runs",
            "run_events",
            "kb_documents",
            "kb_chunks",
            "workdir_index",
            "alembic_version",
        }
        assert expected <= _tables(url)
        # The models and the migration chain describe the same schema.
        command.check(alembic_config(url))
        downgrade_base(url)
        assert _tables(url) == {"alembic_version"}
        with psycopg.connect(libpq_url(url)) as conn:
            enums = conn.execute("SELECT typname FROM pg_type WHERE typtype = 'e'").fetchall()
        assert enums == []
        upgrade_head(url)
        assert expected <= _tables(url)


def test_one_active_run_per_thread_is_enforced_by_the_schema(database_url: str) -> None:
    with fresh_database(database_url) as url, psycopg.connect(libpq_url(url)) as conn:
        upgrade_head(url)
        conn.execute(
            "INSERT INTO conversations (id, owner_id, agent_id, title) "
            "VALUES ('00000000-0000-0000-0000-000000000001', 'o', 'a', 't')"
        )
        for i in (1, 2):
            conn.execute(
                "INSERT INTO agent_run_requests (id, conversation_id, seq, payload, status) VALUES "
                f"('00000000-0000-0000-0000-00000000010{i}', '00000000-0000-0000-0000-000000000001', "
                f"{i}, '{{}}', 'dispatched')"
            )
        conn.execute(
            "INSERT INTO agent_runs (id, conversation_id, request_id, status) VALUES "
            "('00000000-0000-0000-0000-000000000201', '00000000-0000-0000-0000-000000000001', "
            "'00000000-0000-0000-0000-000000000101', 'running')"
        )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO agent_runs (id, conversation_id, request_id, status) VALUES "
                "('00000000-0000-0000-0000-000000000202', '00000000-0000-0000-0000-000000000001', "
                "'00000000-0000-0000-0000-000000000102', 'interrupted')"
            )


def test_dropping_archived_is_reversible(database_url: str) -> None:
    """0006_i18 drops the never-set ``conversations.archived``; its downgrade restores it (false
    for the rows already there), so rolling back a deploy keeps the older code's queries valid."""
    script = ScriptDirectory.from_config(alembic_config(database_url))
    before = script.get_revision("0006_i18").down_revision
    assert isinstance(before, str)

    def columns(conn: psycopg.Connection[Any]) -> set[str]:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'conversations'"
        ).fetchall()
        return {r[0] for r in rows}

    with fresh_database(database_url) as url:
        upgrade_head(url)
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            assert "archived" not in columns(conn)
            conn.execute(
                "INSERT INTO conversations (id, owner_id, agent_id, title) "
                "VALUES ('00000000-0000-0000-0000-000000000001', 'o', 'a', 't')"
            )
        command.downgrade(alembic_config(url), before)
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            assert "archived" in columns(conn)
            row = conn.execute("SELECT archived FROM conversations").fetchone()
            assert row == (False,)
        upgrade_head(url)
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            assert "archived" not in columns(conn)


def _run_events_keys(url: str) -> tuple[list[str], set[str]]:
    """The primary key's columns in order, and the table's index names."""
    with psycopg.connect(libpq_url(url)) as conn:
        pk = conn.execute(
            "SELECT a.attname FROM pg_index i"
            " JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
            " WHERE i.indrelid = 'run_events'::regclass AND i.indisprimary ORDER BY k.n"
        ).fetchall()
        names = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'run_events'"
        ).fetchall()
    return [r[0] for r in pk], {r[0] for r in names}


def test_run_events_primary_key_leads_with_the_run_and_downgrades(database_url: str) -> None:
    """0009: the primary key ``(run_id, id)`` replaces the separate ``(run_id, id)`` index."""
    with fresh_database(database_url) as url:
        upgrade_head(url)
        assert _run_events_keys(url) == (["run_id", "id"], {"pk_run_events"})
        command.downgrade(alembic_config(url), "0008_i23_wal")
        assert _run_events_keys(url) == (["id"], {"pk_run_events", "ix_run_events_run_id_id"})
        upgrade_head(url)
        assert _run_events_keys(url)[0] == ["run_id", "id"]


def _fillfactors(url: str) -> dict[str, list[str] | None]:
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute(
            "SELECT relname, reloptions FROM pg_class"
            " WHERE relname IN ('conversations', 'agent_runs') AND relkind = 'r'"
        ).fetchall()
    return {r[0]: r[1] for r in rows}


def test_step_updated_tables_keep_room_for_hot_updates_and_downgrade(database_url: str) -> None:
    """0010: fillfactor 80 on the tables each graph step updates; downgrade resets it."""
    with fresh_database(database_url) as url:
        upgrade_head(url)
        assert _fillfactors(url) == {
            "conversations": ["fillfactor=80"],
            "agent_runs": ["fillfactor=80"],
        }
        command.downgrade(alembic_config(url), "0009_i23_wal_run_events")
        assert _fillfactors(url) == {"conversations": None, "agent_runs": None}


def _alembic_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The plain Alembic CLI, as deploy/docker-compose.yml's migrate service and an operator run it."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("alembic")), *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _env_without_database(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "THREADKEEPER_DATABASE_URL")
    }
    env.update(extra)
    return env


@pytest.mark.parametrize("variable", ["DATABASE_URL", "THREADKEEPER_DATABASE_URL"])
def test_the_alembic_cli_upgrades_and_downgrades_with_the_url_from_the_environment(
    database_url: str, variable: str
) -> None:
    with fresh_database(database_url) as url:
        env = _env_without_database(**{variable: url})
        up = _alembic_cli("upgrade", "head", env=env)
        assert up.returncode == 0, up.stderr
        assert "workdir_index" in _tables(url)
        current = _alembic_cli("current", env=env)
        assert current.returncode == 0, current.stderr
        assert set(head_revisions()) <= set(current.stdout.split())
        down = _alembic_cli("downgrade", "base", env=env)
        assert down.returncode == 0, down.stderr
        assert _tables(url) == {"alembic_version"}


def test_the_alembic_cli_without_a_url_says_what_to_set() -> None:
    done = _alembic_cli("upgrade", "head", env=_env_without_database())
    assert done.returncode != 0
    assert "set DATABASE_URL" in done.stderr
    assert "Traceback" not in done.stderr
