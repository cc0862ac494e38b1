"""Lost database connections (issue 10, item 1), against real PostgreSQL and real sockets.

Two faults: every backend of the service killed with ``pg_terminate_backend`` (the pools hold
dead connections afterwards), and the database unreachable for a while (a real TCP proxy between
the service and PostgreSQL is closed, then reopened). The promises: the next request after a drop
succeeds, a request that cannot reach the database gets 503 ``database_unavailable`` (never 500),
and a run caught by an outage goes on from its last checkpoint once the database answers.
"""

from __future__ import annotations

import asyncio
import psycopg
import pytest

from app.db.urls import libpq_url
from tests.conftest import AUTH, AppFactory
from tests.integration.test_agent_runtime import messages, new_thread
from tests.integration.test_context_compression import BIG, run_turns, seed_kb, state

pytestmark = pytest.mark.integration


def _service_backends(url: str) -> dict[int, str]:
    """pid -> application_name of every backend of the service on the test database."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND application_name LIKE 'threadkeeper%'"
        ).fetchall()
    return {int(r[0]): str(r[1]) for r in rows}


def _terminate_all(url: str, pids: list[int]) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_every_pool_survives_terminated_backends(
    app_factory: AppFactory, clean_db: str
) -> None:
    async with app_factory(**BIG) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the heartbeat?"])
        await state(h, tid)  # the checkpointer pool has served this thread

        backends = await asyncio.to_thread(_service_backends, clean_db)
        names = set(backends.values())
        # Each pool says who it is, so operators (and this test) can tell them apart.
        assert {"threadkeeper-sql", "threadkeeper-checkpointer"} <= names, names
        await asyncio.to_thread(_terminate_all, clean_db, list(backends))

        # Every request after the drop succeeds, on both pools.
        for _ in range(3):
            got = await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)
            assert got.status_code == 200, got.text
        compress = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert compress.status_code == 200, compress.text
        assert (await state(h, tid))["summary"]["present"] is True

        # And so do later runs.
        await run_turns(h, tid, ["after the drop?", "and once more?"])
        users = [m["content"] for m in await messages(h, tid) if m["role"] == "user"]
        assert users[-2:] == ["after the drop?", "and once more?"]
        fresh = await asyncio.to_thread(_service_backends, clean_db)
        assert not set(fresh) & set(backends)  # all served by new connections

