"""One database URL in, the two driver flavours out (asyncpg for SQLAlchemy, libpq for psycopg)."""

from __future__ import annotations

from sqlalchemy.engine import make_url


def sqlalchemy_url(url: str) -> str:
    """``postgresql://...`` -> ``postgresql+asyncpg://...`` (the repositories' driver)."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """Any ``postgresql+driver://`` URL -> plain ``postgresql://`` for psycopg (the checkpointer)."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)
