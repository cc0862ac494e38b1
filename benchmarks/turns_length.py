"""The thread-length phase of ``benchmarks/turns.py``: one thread grown to a number of turns and,
at each length, a window of turns measured one by one (latency, worker CPU, the worker's
PostgreSQL round trips through the counting proxy, WAL bytes from ``pg_walinspect`` and the model
calls each turn made)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.service import (
    READY_SECONDS,
    Connection,
    counting_proxy,
    create_threads,
    endpoint,
    thread_cpu_seconds,
    wait_http_ready,
)
from benchmarks.turns_driver import completions, database, post, service, turn


# --- 2. thread length ----------------------------------------------------------------------------
@dataclass
class TurnCost:
    latency_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    round_trips: list[int] = field(default_factory=list)
    wal_bytes: list[int] = field(default_factory=list)
    #: Of ``wal_bytes``, the full-page images: the first change to a page after a PostgreSQL
    #: checkpoint logs the whole page. They depend on when checkpoints fall (other databases'
    #: writes on a shared server bring them on), so they are printed apart.
    fpi_bytes: list[int] = field(default_factory=list)
    #: The turn's shape: the model calls it made (its ``assistant`` messages). The offline model looks
    #: into the Workdir once a thread holds a summary and the knowledge base has nothing, so a
    #: late turn can be a longer turn (model -> query_kb -> model -> search_workdir -> model).
    model_calls: list[int] = field(default_factory=list)
    #: ``--wal-by-relation``: per turn, WAL bytes per (relation, record type).
    wal_by_relation: list[dict[tuple[str, str], int]] = field(default_factory=list, repr=False)
    #: Why WAL could not be read per relation (the server has no ``pg_walinspect``), else empty:
    #: then ``wal_bytes`` is the whole cluster's and there are no full-page-image figures.
    wal_unavailable: str = ""


class WalMeter:
    """WAL written for this database's relations between two points (pg_walinspect), else the
    whole cluster's (other databases' writes included)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.inspect = False
        #: Why ``pg_walinspect`` could not be used (empty when it is).
        self.unavailable = ""
        self.oid = 0
        #: The end LSN of the last ``since``.
        self.end = ""

    async def open(self) -> None:
        try:
            await self.db.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            self.inspect = True
        except Exception as exc:  # psycopg.Error (imported lazily by the caller)
            # The embedded PostgreSQL (pgserver) ships without it, for one.
            version = await (await self.db.execute("SHOW server_version")).fetchone()
            diag = getattr(exc, "diag", None)
            detail = (getattr(diag, "message_primary", None) or str(exc)).strip().rstrip(".")
            self.unavailable = (
                f"this server (PostgreSQL {version[0]}) has no pg_walinspect extension ({detail})"
            )
        row = await (
            await self.db.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        ).fetchone()
        self.oid = int(row[0])

    async def lsn(self) -> str:
        row = await (await self.db.execute("SELECT pg_current_wal_flush_lsn()::text")).fetchone()
        return str(row[0])

    async def since(self, start: str) -> tuple[int, int]:
        """Bytes written since ``start`` and, of those, full-page images (0 when unknown)."""
        end = self.end = await self.lsn()
        if not self.inspect:
            row = await (
                await self.db.execute("SELECT %s::pg_lsn - %s::pg_lsn", (end, start))
            ).fetchone()
            return int(row[0]), 0
        row = await (
            await self.db.execute(
                "SELECT coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0)"
                " FROM pg_get_wal_records_info(%s, %s) WHERE block_ref LIKE %s",
                (start, end, f"%/{self.oid}/%"),
            )
        ).fetchone()
        return int(row[0]), int(row[1])

    async def by_relation(self, start: str, end: str) -> dict[tuple[str, str], int]:
        """WAL bytes between two LSNs grouped by the relation of each record's first block
        reference (a TOAST relation as ``toast(<table>)``) and record type, the full-page images
        apart, records of this database only; a relation dropped since shows as its file node."""
        if not self.inspect:
            return {}
        cur = await self.db.execute(
            """
            WITH r AS (
                SELECT record_length - fpi_length AS record_length,
                       resource_manager || '/' || record_type AS kind,
                       substring(block_ref FROM 'rel [0-9]+/[0-9]+/([0-9]+)')::oid AS node,
                       substring(block_ref FROM 'rel ([0-9]+)/')::oid AS spc
                FROM pg_get_wal_records_info(%(start)s, %(end)s)
                WHERE block_ref LIKE %(db)s
                UNION ALL
                SELECT fpi_length, 'full-page images',
                       substring(block_ref FROM 'rel [0-9]+/[0-9]+/([0-9]+)')::oid,
                       substring(block_ref FROM 'rel ([0-9]+)/')::oid
                FROM pg_get_wal_records_info(%(start)s, %(end)s)
                WHERE block_ref LIKE %(db)s AND fpi_length > 0
            ), named AS (
                SELECT r.record_length, r.kind, r.node,
                       pg_filenode_relation(
                           CASE WHEN r.spc = d.dattablespace THEN 0 ELSE r.spc END, r.node
                       ) AS rel
                FROM r CROSS JOIN (
                    SELECT dattablespace FROM pg_database WHERE datname = current_database()
                ) d
            )
            SELECT coalesce(
                       (SELECT 'toast(' || o.relname || ')' FROM pg_class o
                        WHERE o.reltoastrelid = n.rel),
                       (SELECT t.relname || ' (toast index)' FROM pg_class t
                        JOIN pg_index i ON i.indrelid = t.reltoastrelid
                        WHERE i.indexrelid = n.rel),
                       n.rel::regclass::text,
                       'filenode ' || n.node
                   ) AS relation,
                   n.kind,
                   sum(n.record_length)::bigint
            FROM named n
            GROUP BY 1, 2
            """,
            {"start": start, "end": end, "db": f"%/{self.oid}/%"},
        )
        return {(str(name), str(kind)): int(size) for name, kind, size in await cur.fetchall()}


async def model_calls(db: Any, thread_id: str) -> int:
    """The thread's model calls so far (its stored ``assistant`` messages)."""
    cur = await db.execute(
        "SELECT count(*) FROM messages WHERE conversation_id = %s AND role = 'assistant'",
        (thread_id,),
    )
    row = await cur.fetchone()
    return int(row[0])


# What the knowledge base holds in the thread-length phase. ``empty``: ``query_kb`` finds nothing,
# so once the thread holds a summary or offloaded results the offline model also searches the
# Workdir (a turn becomes three model calls instead of two). ``answers``: one document answers
# every turn's question, so every turn has the same shape (``query_kb``, then the answer quoting
# it) at every length, and each turn adds a real result to the context.
KB_DOCUMENT = {
    "title": "Leases",
    "url": "https://docs.example/leases",
    "content": "A run lease expires when the worker stops sending heartbeats. "
    "Each lease is renewed by every heartbeat of the worker that holds it.",
}


async def thread_length(
    server: str,
    lengths: list[int],
    window: int,
    logs: Path,
    kb: str = "empty",
    by_relation: bool = False,
) -> dict[int, TurnCost]:
    import psycopg

    from app.db.urls import libpq_url

    out: dict[int, TurnCost] = {}
    async with database(server) as url:
        workdir = tempfile.mkdtemp(prefix="tk_turns_")
        async with counting_proxy(url) as (proxy, proxied):
            stack = contextlib.ExitStack()
            # The worker talks through the proxy, which runs on this loop: start and stop the
            # service off it.
            base, pid = await asyncio.to_thread(
                stack.enter_context, service("deploy", url, proxied, workdir, logs)
            )
            try:
                await wait_http_ready(base, "/ready", time.monotonic() + READY_SECONDS)
                conn = Connection(*endpoint(base))
                if kb == "answers":
                    status, body = await conn.request(
                        "POST",
                        "/v1/knowledge-bases/default/documents",
                        json.dumps(KB_DOCUMENT).encode(),
                    )
                    assert status == 201, body
                (thread_id,) = await create_threads(base, 1)
                async with (
                    completions(url) as done,
                    await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as db,
                ):
                    wal = WalMeter(db)
                    await wal.open()
                    n = 0
                    for length in sorted(lengths):
                        backlog = [
                            await post(conn, thread_id, n + i)
                            for i in range(max(0, length - window - n))
                        ]
                        n += len(backlog)
                        for request_id in backlog:
                            await asyncio.wait_for(done.wait(request_id), 600)
                        cost = out[length] = TurnCost(wal_unavailable=wal.unavailable)
                        while n < length:
                            await asyncio.sleep(0.05)  # the claim loop settles
                            calls0 = await model_calls(db, thread_id)
                            rt0, cpu0, lsn0 = (
                                proxy.counts.round_trips,
                                thread_cpu_seconds(pid),
                                await wal.lsn(),
                            )
                            cost.latency_ms.append(await turn(conn, done, thread_id, n) * 1000)
                            cost.cpu_ms.append((thread_cpu_seconds(pid) - cpu0) * 1000)
                            cost.round_trips.append(proxy.counts.round_trips - rt0)
                            written, images = await wal.since(lsn0)
                            cost.wal_bytes.append(written)
                            cost.fpi_bytes.append(images)
                            if by_relation:
                                cost.wal_by_relation.append(await wal.by_relation(lsn0, wal.end))
                            cost.model_calls.append(await model_calls(db, thread_id) - calls0)
                            n += 1
                conn.close()
            finally:
                await asyncio.to_thread(stack.close)
    return out
