"""Before a process starts serving: is the database there at all? One clear answer, quickly.

Without this check an unreachable database surfaced tens of seconds later (the pools' own
connect retries) as a long traceback. Here every attempt is bounded by what is left of
``timeout`` (asyncpg under ``asyncio.wait_for``: libpq's ``connect_timeout`` rounds up to 2 s),
a refused connection is retried until then (the database may be starting next to us), and a
refusal by PostgreSQL itself (wrong password, no such database) is final at once.
"""

from __future__ import annotations

import asyncio
import ssl

import asyncpg

from app.db.urls import parse

#: Pause between attempts while the database refuses connections.
RETRY_SECONDS = 0.25


def describe(url: str) -> str:
    """``host:port/db`` of ``url``, never its password."""
    return parse(url).describe()


async def database_problem(url: str, timeout: float) -> str | None:
    """None once one connection succeeded within ``timeout`` seconds, else why not (one line)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = "no attempt"
    target = parse(url)
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return f"the database at {describe(url)} did not answer within {timeout:g} s ({last})"
        try:
            conn = await asyncio.wait_for(
                asyncpg.connect(
                    **target.asyncpg_kwargs(
                        application_name="threadkeeper-preflight", timeout=remaining
                    )
                ),
                remaining,
            )
        except asyncpg.PostgresError as exc:  # PostgreSQL answered and refused: final
            return f"the database at {describe(url)} refused the connection: {_one_line(exc)}"
        except (TimeoutError, OSError, asyncpg.InterfaceError, ssl.SSLError) as exc:
            if isinstance(exc, ssl.SSLCertVerificationError):  # a wrong CA or host: final
                return f"the database at {describe(url)} failed TLS verification: {_one_line(exc)}"
            last = f"{type(exc).__name__}: {_one_line(exc)}" if str(exc) else type(exc).__name__
            await asyncio.sleep(min(RETRY_SECONDS, max(0.0, deadline - loop.time())))
            continue
        await conn.close()
        return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
