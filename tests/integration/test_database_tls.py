"""Managed PostgreSQL over TLS: the URL an operator pastes (``sslmode=require``, ``verify-full``
with a CA file, a client certificate) reaches a real TLS-only PostgreSQL through both drivers,
the repositories' asyncpg and the checkpointer's psycopg, and ``verify-full`` really verifies
(a wrong CA or a wrong host name is refused by both). The cluster is created by the test
(tests/support/tls_postgres.py: openssl + initdb; non-TLS connections are rejected)."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import text

from app.db.preflight import database_problem
from app.db.session import create_engine
from app.db.urls import parse
from tests.support.app_harness import AUTH
from tests.support.processes import app_run, served
from tests.support.tls_postgres import CLIENT_KEY_PASSWORD, TlsCluster, tls_postgres

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Whether this session speaks TLS, seen by the server.
SSL_OF_SESSION = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"


@pytest.fixture(scope="module")
def cluster() -> Iterator[TlsCluster]:
    with tls_postgres() as made:
        yield made


async def _asyncpg_ssl(url: str) -> tuple[bool, str]:
    """(TLS in use, user) of a connection of the service's SQLAlchemy engine."""
    engine = create_engine(url, pool_size=1, timeout_seconds=10)
    try:
        async with engine.connect() as conn:
            used = bool(await conn.scalar(text(SSL_OF_SESSION)))
            return used, str(await conn.scalar(text("SELECT current_user")))
    finally:
        await engine.dispose()


def _psycopg_ssl(url: str) -> tuple[bool, str]:
    """The same through the checkpointer's conninfo (psycopg, libpq)."""
    with psycopg.connect(parse(url).conninfo(), autocommit=True) as conn:
        row = conn.execute(f"SELECT ({SSL_OF_SESSION}), current_user").fetchone()
        assert row is not None
        return bool(row[0]), str(row[1])


async def test_sslmode_require_encrypts_through_both_drivers(cluster: TlsCluster) -> None:
    # 127.0.0.1 is not the certificate's name: require does not verify, so it connects.
    url = cluster.url("sslmode=require", host="127.0.0.1")
    assert await database_problem(url, 10) is None
    assert await _asyncpg_ssl(url) == (True, "postgres")
    assert _psycopg_ssl(url) == (True, "postgres")
    # The server takes nothing else (so the above could not have passed without TLS).
    problem = await database_problem(cluster.url("sslmode=disable", host="127.0.0.1"), 5)
    assert problem is not None and "refused" in problem and "no encryption" in problem


async def test_verify_full_with_the_right_ca_and_host(cluster: TlsCluster) -> None:
    url = cluster.url(f"sslmode=verify-full&sslrootcert={cluster.ca}")
    assert await database_problem(url, 10) is None
    assert await _asyncpg_ssl(url) == (True, "postgres")
    assert _psycopg_ssl(url) == (True, "postgres")


async def test_verify_full_refuses_a_certificate_of_another_ca(cluster: TlsCluster) -> None:
    url = cluster.url(f"sslmode=verify-full&sslrootcert={cluster.other_ca}")
    problem = await database_problem(url, 5)
    assert problem is not None and "failed TLS verification" in problem, problem
    with pytest.raises(ssl.SSLCertVerificationError):
        await _asyncpg_ssl(url)
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        _psycopg_ssl(url)


async def test_verify_full_refuses_a_host_the_certificate_is_not_for(cluster: TlsCluster) -> None:
    """Right CA, wrong name: verify-full refuses, verify-ca (the CA only) connects."""
    url = cluster.url(f"sslmode=verify-full&sslrootcert={cluster.ca}", host="127.0.0.1")
    problem = await database_problem(url, 5)
    assert problem is not None and "failed TLS verification" in problem, problem
    with pytest.raises(ssl.SSLCertVerificationError, match=r"127\.0\.0\.1"):
        await _asyncpg_ssl(url)
    with pytest.raises(psycopg.OperationalError, match="does not match host name"):
        _psycopg_ssl(url)
    ca_only = cluster.url(f"sslmode=verify-ca&sslrootcert={cluster.ca}", host="127.0.0.1")
    assert await _asyncpg_ssl(ca_only) == (True, "postgres")
    assert _psycopg_ssl(ca_only) == (True, "postgres")


async def test_a_client_certificate_with_an_encrypted_key(cluster: TlsCluster) -> None:
    """``certuser`` must present a certificate signed by the CA (pg_hba clientcert=verify-full);
    the key is encrypted and opened with sslpassword, by both drivers."""
    query = (
        f"sslmode=verify-full&sslrootcert={cluster.ca}&sslcert={cluster.client_cert}"
        f"&sslkey={cluster.client_key}&sslpassword={CLIENT_KEY_PASSWORD}"
    )
    url = cluster.url(query, user="certuser")
    assert await _asyncpg_ssl(url) == (True, "certuser")
    assert _psycopg_ssl(url) == (True, "certuser")
    without = cluster.url(f"sslmode=verify-full&sslrootcert={cluster.ca}", user="certuser")
    problem = await database_problem(without, 5)
    assert problem is not None and "certificate" in problem, problem


async def test_serve_over_tls_runs_a_turn_and_reads_agent_state(
    cluster: TlsCluster, tmp_path: Path
) -> None:
    """The issue's reproduction: ``serve`` with ``?sslmode=require`` died at start with a
    traceback. Now it migrates, answers /ready, runs a turn (the worker's writes, the
    checkpointer's) and reads the agent state, every one of its connections encrypted."""
    url = cluster.url("sslmode=require", host="127.0.0.1")
    env = {
        "DATABASE_URL": url,
        "THREADKEEPER_MIGRATE_ON_START": "true",
        "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
        "THREADKEEPER_API_KEYS": f"alice:{AUTH['Authorization'].split()[1]}",
        "THREADKEEPER_LOG_LEVEL": "WARNING",
    }
    async with (
        served(env, tmp_path / "serve.log", inherit_settings=False) as (base, _),
        httpx.AsyncClient(base_url=base, headers=AUTH, timeout=30) as client,
    ):
        tid = (await client.post("/v1/threads", json={})).json()["id"]
        posted = await client.post(f"/v1/threads/{tid}/messages", json={"content": "hello"})
        assert posted.status_code in (200, 201, 202), posted.text
        await _wait_completed(client, tid)
        state = await client.get(f"/v1/threads/{tid}/agent-state")
        assert state.status_code == 200, state.text
        with psycopg.connect(parse(url).conninfo(), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT a.application_name, s.ssl FROM pg_stat_activity a "
                "JOIN pg_stat_ssl s USING (pid) WHERE a.application_name LIKE 'threadkeeper-%'"
            ).fetchall()
        names = {name for name, _ in rows}
        assert {"threadkeeper-sql", "threadkeeper-checkpointer", "threadkeeper-listener"} <= names
        assert all(used for _, used in rows), rows


async def _wait_completed(client: httpx.AsyncClient, tid: str) -> None:
    for _ in range(600):
        runs = (await client.get(f"/v1/threads/{tid}/runs")).json()["items"]
        if runs and runs[0]["status"] == "completed":
            return
        assert not runs or runs[0]["status"] in ("queued", "running"), runs
        await asyncio.sleep(0.1)
    raise AssertionError("the run did not complete")


def test_check_says_the_connection_is_encrypted(cluster: TlsCluster) -> None:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    url = cluster.url(f"sslmode=verify-full&sslrootcert={cluster.ca}")
    out = app_run(["check"], {**keep, "DATABASE_URL": url})
    assert "Traceback" not in out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("ok      connections:")]
    assert any(
        f"the connection to localhost:{cluster.port}/postgres is encrypted (TLSv1.3, "
        "sslmode=verify-full)" in line
        for line in lines
    ), out.stdout


def test_serve_refuses_a_parameter_asyncpg_cannot_honour_in_one_line() -> None:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    for query, named in (
        ("sslmode=require&channel_binding=require", "channel_binding"),
        ("sslmode=verify-full", "sslrootcert"),
    ):
        env = {**keep, "DATABASE_URL": f"postgresql://tk@db.internal:5432/tk?{query}"}
        out = app_run(["serve"], env)
        assert out.returncode == 2, out
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert lines[0].startswith("threadkeeper: ") and named in lines[0], lines
