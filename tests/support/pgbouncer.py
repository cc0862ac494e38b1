"""A real PgBouncer (Debian's ``pgbouncer``, scripts/ensure_pgbouncer.sh) in transaction mode in
front of the test database: its own process on a free port, stopped afterwards.

Two database names lead to the test database: ``pooled`` (``pool_size`` server connections
shared by every client) and ``single`` (one server connection for all: consecutive transactions
of different clients always meet on it, so a named prepared statement left by one client is
always in the next one's way). Any other name is that database on the same server.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from tests.support.processes import free_port
from tests.support.system_user import (
    SERVER_USER,
    as_server_user,
    give_to_server_user,
    server_dir,
)

PGBOUNCER = "/usr/sbin/pgbouncer"


@dataclass(frozen=True)
class Bouncer:
    port: int
    user: str
    password: str | None
    dir: Path

    def url(self, database: str = "pooled") -> str:
        secret = f":{self.password}" if self.password else ""
        return f"postgresql://{self.user}{secret}@127.0.0.1:{self.port}/{database}"

    @property
    def log(self) -> str:
        return (self.dir / "pgbouncer.log").read_text(errors="replace")


@contextlib.contextmanager
def pgbouncer(database_url: str, *, pool_size: int = 6) -> Iterator[Bouncer]:
    """PgBouncer in transaction mode in front of ``database_url``'s database."""
    target = make_url(database_url)
    user = target.username or "postgres"
    password = target.password
    # The embedded server is reached through its Unix socket directory (``?host=/dir``).
    host = str(target.host or target.query.get("host") or "127.0.0.1")
    port = target.port or target.query.get("port") or 5432
    server = f"host={host} port={port} dbname={target.database} user={user}" + (
        f" password={password}" if password else ""
    )
    # A socket directory is private to the server's own account (the embedded server's is
    # ``pgserver``): PgBouncer then runs as that account.
    owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else SERVER_USER
    d = server_dir("tk-pgbouncer-", owner)
    port = free_port()
    (d / "userlist.txt").write_text(f'"{user}" ""\n')
    (d / "pgbouncer.ini").write_text(
        f"[databases]\npooled = {server} pool_size={pool_size}\nsingle = {server} pool_size=1\n"
        # Any other name: that database on the same server (fresh databases of a test).
        f"* = {server.replace(f'dbname={target.database} ', '')} pool_size={pool_size}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {d}/userlist.txt\n"
        f"pool_mode = transaction\nmax_client_conn = 400\nadmin_users = {user}\n"
        # Clients wait for a server connection instead of being refused.
        "query_wait_timeout = 120\n"
        f"logfile = {d}/pgbouncer.log\n"
    )
    for name in ("userlist.txt", "pgbouncer.ini"):  # readable by the server user, any umask
        give_to_server_user(d / name, 0o644, owner)
    proc = subprocess.Popen(
        as_server_user([PGBOUNCER, str(d / "pgbouncer.ini")], owner),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bouncer = Bouncer(port=port, user=user, password=password, dir=d)
    try:
        _wait_ready(bouncer, proc)
        yield bouncer
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(d, ignore_errors=True)


def _wait_ready(bouncer: Bouncer, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, f"pgbouncer exited with {proc.returncode}: {bouncer.log}"
        try:
            with psycopg.connect(bouncer.url(), prepare_threshold=None, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def route_env(route: Mapping[str, str], database_url: str) -> dict[str, str]:
    """A ``database_route`` (tests/conftest.py) as the environment of ``python -m app``
    processes: ``DATABASE_URL`` (``database_url`` on the direct route) and the pooler's
    ``THREADKEEPER_*`` settings."""
    env = {"DATABASE_URL": route.get("database_url", database_url)}
    env.update({f"THREADKEEPER_{k.upper()}": v for k, v in route.items() if k != "database_url"})
    return env
