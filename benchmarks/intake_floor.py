"""Intake's floor app (``benchmarks/intake.py``): the least an HTTP app can do for PostMessage,
Litestar + asyncpg taking the same row lock and writing the same rows as the service and nothing
else, served in a child process by ``benchmarks/service.py``; and its threads, seeded directly
(it has no CreateThread)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg
import msgspec
from litestar import Litestar, Request, Response, post

from benchmarks.service import API_KEY, PRINCIPAL

FLOOR_LOCK_TIMEOUT_MS = 5000


# --- the floor app (child process) ------------------------------------------------------------
class FloorBody(msgspec.Struct):
    content: str


@post("/v1/threads/{thread_id:uuid}/messages", status_code=202)
async def floor_post_message(
    thread_id: uuid.UUID, data: FloorBody, request: Request[Any, Any, Any]
) -> Response[Any]:
    """The least an HTTP app can do for PostMessage: the same rows and row lock, no framework
    features beyond routing and msgspec decoding."""
    if request.headers.get("authorization") != f"Bearer {API_KEY}":
        return Response({"error": "unauthorized"}, status_code=401)
    pool: asyncpg.Pool = request.app.state.pool
    message_id, request_id = uuid.uuid4(), uuid.uuid4()
    lc_id = f"user-{uuid.uuid4()}"
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {FLOOR_LOCK_TIMEOUT_MS}")
        row = await conn.fetchrow(
            "SELECT id FROM conversations WHERE id = $1 AND owner_id = $2 FOR UPDATE",
            thread_id,
            PRINCIPAL,
        )
        if row is None:
            return Response({"error": "not_found"}, status_code=404)
        seqs = await conn.fetchrow(
            "UPDATE conversations SET next_message_seq = next_message_seq + 1, "
            "next_request_seq = next_request_seq + 1, updated_at = now() WHERE id = $1 "
            "RETURNING next_message_seq - 1 AS m, next_request_seq - 1 AS r",
            thread_id,
        )
        await conn.execute(
            "INSERT INTO messages (id, conversation_id, seq, role, content, lc_id, request_id)"
            " VALUES ($1, $2, $3, 'user', $4, $5, $6)",
            message_id,
            thread_id,
            seqs["m"],
            data.content,
            lc_id,
            request_id,
        )
        await conn.execute(
            "INSERT INTO agent_run_requests (id, conversation_id, seq, payload, status) "
            "VALUES ($1, $2, $3, $4::jsonb, 'queued')",
            request_id,
            thread_id,
            seqs["r"],
            json.dumps({"content": data.content, "message_id": str(message_id), "lc_id": lc_id}),
        )
    return Response(
        {"request_id": str(request_id), "message_id": str(message_id), "status": "queued"},
        status_code=202,
    )


def floor_app(database_url: str) -> Litestar:
    from app.db.urls import libpq_url

    async def startup(app: Litestar) -> None:
        app.state.pool = await asyncpg.create_pool(
            libpq_url(database_url), min_size=10, max_size=10
        )

    async def shutdown(app: Litestar) -> None:
        await app.state.pool.close()

    return Litestar([floor_post_message], on_startup=[startup], on_shutdown=[shutdown])


def seed_threads(database_url: str, count: int) -> list[str]:
    """The floor has no CreateThread: the same rows, inserted directly."""
    import psycopg

    from app.db.urls import libpq_url

    ids = [str(uuid.uuid4()) for _ in range(count)]
    with psycopg.connect(libpq_url(database_url)) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO conversations (id, owner_id, agent_id, title) VALUES (%s, %s, 'default', '')",
            [(i, PRINCIPAL) for i in ids],
        )
    return ids
