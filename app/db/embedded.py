"""Embedded PostgreSQL (pgserver) used when no database URL is configured.

It lets the README's two commands work on a machine without a database server. As root, pgserver
creates a ``pgserver`` system user and widens permissions on the data folder's parents so that user
can reach it; run as an unprivileged user to avoid that (see README).
"""

from __future__ import annotations

from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def start_embedded_postgres(data_dir: str | Path) -> str:
    """Start (or reuse) a private PostgreSQL on a Unix socket and return its URL."""
    import pgserver  # imported lazily: only needed without DATABASE_URL

    path = Path(data_dir).resolve()
    path.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(path, cleanup_mode="stop")
    url = server.get_uri()
    log.info("embedded_postgres_started", data_dir=str(path))
    return url
