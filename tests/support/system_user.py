"""Server processes that refuse to run as root (``initdb``, ``postgres``, ``pgbouncer``).

The machines and CI run the tests as root; these servers are then run as the ``postgres`` system
user (the Debian PostgreSQL packages create it) through ``setpriv`` (which execs the server: its
process id is the server's, for a test to stop), in a directory it owns. As an ordinary user they
simply run as that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

#: The unprivileged account the servers run as when the tests run as root.
SERVER_USER = "postgres"


def as_server_user(argv: list[str], user: str = SERVER_USER) -> list[str]:
    """``argv`` run as ``user`` when we are root, else as is."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    ids = f"--reuid={user}", f"--regid={user}", "--init-groups"
    return [setpriv, *ids, "--", *argv]


def server_dir(prefix: str, user: str = SERVER_USER) -> Path:
    """A new directory the server user owns and can reach (``/tmp`` is world-searchable; pytest's
    own temporary directories under ``/tmp/pytest-of-root`` are not)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    if os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def give_to_server_user(path: Path, mode: int, user: str = SERVER_USER) -> None:
    """A file the server reads (a private key must be its own, mode 0600)."""
    path.chmod(mode)
    if os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def run_as_server_user(argv: list[str], *, timeout: float = 120) -> str:
    """Run to its end; its output, or an AssertionError carrying it."""
    done = subprocess.run(
        as_server_user(argv), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv[0]} failed ({done.returncode}): {done.stderr}{done.stdout}"
    return done.stdout
