"""Where the test suite's PostgreSQL comes from.

``TEST_DATABASE_URL`` when set (CI); else a testcontainers PostgreSQL when Docker answers; else an
embedded pgserver PostgreSQL, so the README's test command works on a machine with no server.
Each session gets a fresh database created on that server and dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator

import psycopg
from sqlalchemy.engine import make_url


@contextlib.contextmanager
def server_url() -> Iterator[str]:
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        yield url
        return
    container = None
    try:
        from testcontainers.community.postgres import PostgresContainer

        container = PostgresContainer("postgres:16-alpine", driver=None)
        container.start()
    except Exception:  # no Docker daemon here: DockerException from the constructor
        container = None
    if container is not None:
        try:
            yield container.get_connection_url()
        finally:
            container.stop()
        return
    from app.db.embedded import start_embedded_postgres

    data_dir = os.environ.get("THREADKEEPER_TEST_PG_DIR") or os.path.join(
        tempfile.gettempdir(), "threadkeeper-test-pg"
    )
    yield start_embedded_postgres(data_dir)


def _admin_conninfo(url: str) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


@contextlib.contextmanager
def fresh_database(server: str) -> Iterator[str]:
    name = f"tk_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = _admin_conninfo(server)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
