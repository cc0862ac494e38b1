"""What the database settings (``DATABASE_URL``, ``THREADKEEPER_DATABASE_POOLER``,
``THREADKEEPER_DATABASE_DIRECT_URL``) mean: start-time checks.

Kept apart from ``app/config.py`` (which holds the fields, in ``DatabaseSettings``), as
``config_signin`` is: plain functions over the raw values. The URLs themselves are read by
``app/db/urls.py`` (the one reader of a database URL).
"""

from __future__ import annotations

from app.db.urls import parse

#: URL schemes naming PostgreSQL (a ``+driver`` suffix is allowed and replaced by ours).
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: ``THREADKEEPER_DATABASE_POOLER``: what sits between DATABASE_URL and PostgreSQL.
POOLER_MODES = ("none", "transaction")


def check(database_url: str, pooler: str, direct_url: str) -> None:
    """Refuse at start, in one line naming the setting, what cannot work."""
    if database_url:
        scheme = database_url.partition("://")[0] if "://" in database_url else ""
        if scheme.split("+")[0].lower() not in POSTGRES_SCHEMES:
            got = f"a {scheme}:// URL" if scheme else "no URL scheme"
            raise ValueError(
                "DATABASE_URL / THREADKEEPER_DATABASE_URL must be a PostgreSQL URL "
                f"(postgresql://user:password@host:port/db), got {got}"
            )
        parse(database_url)
    if pooler not in POOLER_MODES:
        raise ValueError(
            f"THREADKEEPER_DATABASE_POOLER must be one of {', '.join(POOLER_MODES)}, got {pooler!r}"
        )
    if direct_url:
        try:
            parse(direct_url)
        except ValueError as exc:
            raise ValueError(f"THREADKEEPER_DATABASE_DIRECT_URL: {exc}") from None
