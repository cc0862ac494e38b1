"""A throwaway PostgreSQL cluster that accepts TLS connections only, with a self-signed CA.

Made with the real tools (``openssl``, ``initdb``, ``pg_ctl``) in a fresh directory: a CA, a
server certificate for ``localhost`` (and only that name) signed by it, a second CA that signed
nothing, and a client certificate. ``pg_hba.conf`` rejects every connection without TLS, so a test
that connects proves the driver spoke TLS; ``user certuser`` must also present a client
certificate signed by the CA.
"""

from __future__ import annotations

import contextlib
import glob
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import free_port
from tests.support.system_user import give_to_server_user, run_as_server_user, server_dir

#: The host name the server certificate is issued for (127.0.0.1 is not in it).
CERT_HOST = "localhost"
CLIENT_KEY_PASSWORD = "client-key-pass"


def postgres_bin(tool: str) -> str:
    """A PostgreSQL server program: on PATH, else Debian's versioned directory."""
    found = shutil.which(tool) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"), reverse=True)), None
    )
    assert found, f"{tool} not found (install PostgreSQL's server package)"
    return found


@dataclass(frozen=True)
class TlsCluster:
    port: int
    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def other_ca(self) -> Path:
        return self.dir / "other-ca.crt"

    @property
    def client_cert(self) -> Path:
        return self.dir / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.dir / "client-encrypted.key"

    def url(self, query: str, *, host: str = CERT_HOST, user: str = "postgres") -> str:
        return f"postgresql://{user}@{host}:{self.port}/postgres?{query}"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _certificates(d: Path) -> None:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        _openssl(
            "req", "-x509", *ec, "-days", "2", "-subj", f"/CN=threadkeeper test {ca}",
            "-keyout", f"{ca}.key", "-out", f"{ca}.crt", cwd=d,
        )  # fmt: skip
    for name, subject in (("server", f"/CN={CERT_HOST}"), ("client", "/CN=certuser")):
        _openssl(
            "req", *ec, "-subj", subject, "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d
        )
        ext = d / f"{name}.ext"
        ext.write_text(f"subjectAltName=DNS:{CERT_HOST}\n" if name == "server" else "")
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", ext.name, "-out", f"{name}.crt", cwd=d,
        )  # fmt: skip
    # The client's key, encrypted (sslpassword opens it).
    _openssl(
        "pkey", "-in", "client.key", "-out", "client-encrypted.key", "-aes256",
        "-passout", f"pass:{CLIENT_KEY_PASSWORD}", cwd=d,
    )  # fmt: skip
    give_to_server_user(d / "server.key", 0o600)
    give_to_server_user(d / "server.crt", 0o644)
    give_to_server_user(d / "ca.crt", 0o644)


@contextlib.contextmanager
def tls_postgres() -> Iterator[TlsCluster]:
    """Start the cluster; stopped and deleted afterwards."""
    d = server_dir("tk-tls-pg-")
    data = d / "data"
    port = free_port()
    try:
        _certificates(d)
        run_as_server_user(
            [
                postgres_bin("initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ]
        )
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{d}'\nmax_connections = 40\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                f"ssl = on\nssl_cert_file = '{d}/server.crt'\nssl_key_file = '{d}/server.key'\n"
                f"ssl_ca_file = '{d}/ca.crt'\n"
            )
        (data / "pg_hba.conf").write_text(
            "local all all trust\n"
            "hostnossl all all 0.0.0.0/0 reject\n"
            "hostssl all certuser 127.0.0.1/32 trust clientcert=verify-full\n"
            "hostssl all all 127.0.0.1/32 trust\n"
        )
        run_as_server_user(
            [postgres_bin("pg_ctl"), "-D", str(data), "-l", str(d / "server.log"), "-w", "start"]
        )
        try:
            run_as_server_user(
                [
                    postgres_bin("psql"), "-h", str(d), "-p", str(port), "-U", "postgres",
                    "-c", "CREATE ROLE certuser LOGIN SUPERUSER",
                ]
            )  # fmt: skip
            yield TlsCluster(port=port, dir=d)
        finally:
            run_as_server_user([postgres_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"])
    finally:
        shutil.rmtree(d, ignore_errors=True)
