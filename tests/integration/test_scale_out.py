"""Scale-out: 2 API processes + 2 worker processes on one database and one S3 bucket.

20 threads post concurrently through both APIs while manual compressions hit one API; a worker is
SIGKILLed while it has runs in flight (their model calls are held by the local OpenAI-protocol
server). Audit: no message lost or duplicated, FIFO per thread, every request reached a terminal
run, and every offloaded file is readable from BOTH APIs with a matching SHA-256.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.db.urls import libpq_url
from tests.support.app_harness import API_KEY, AUTH
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.pgbouncer import route_env
from tests.support.processes import app_process, free_port, reaped, wait_exit, wait_ready
from tests.support.s3_server import S3Server
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

THREADS = 20
PER_THREAD = 2
TERMINAL = ("completed", "failed", "cancelled")
DOC = " ".join(
    f"Lease rule {i}: a worker renews its lease with heartbeats every few seconds; when the "
    f"lease expires the run is recovered by another worker and marked failed."
    for i in range(60)
)


class Model:
    """Agent calls: a query_kb tool call for a new user turn, then an answer held by ``gate``.
    Summarizer calls (no tools in the request) answer at once."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.held = 0
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> dict[str, Any] | str:
        messages = request.get("messages") or []
        if not request.get("tools"):
            return "Summary: leases, heartbeats and recovery were discussed."
        if messages and messages[-1].get("role") == "user":
            return {"tool_calls": [{"name": "query_kb", "args": {"query": "lease heartbeat"}}]}
        with self._lock:
            self.held += 1
        try:
            self.gate.wait(120)
        finally:
            with self._lock:
                self.held -= 1
        return "A lease expires when heartbeats stop [kb]."


def rows(db: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(libpq_url(db)) as conn:
        return conn.execute(sql, args).fetchall()


async def test_two_apis_two_workers_one_killed_audit(
    clean_db: str, tmp_path: Path, s3_server: S3Server, database_route: dict[str, Any]
) -> None:
    """Straight to PostgreSQL, and through PgBouncer in transaction mode (every process's
    pools through it, their LISTEN connections on the direct URL)."""
    model = Model()
    bucket = s3_server.new_bucket()
    with OpenAICompatibleServer() as srv:
        srv.responder = model
        env = {
            **route_env(database_route, clean_db),
            "THREADKEEPER_LLM_BASE_URL": srv.base_url,
            "THREADKEEPER_LLM_API_KEY": "k",
            "THREADKEEPER_API_KEYS": f"alice:{API_KEY}",
            "THREADKEEPER_WORKER_IN_PROCESS": "false",
            "THREADKEEPER_WORKER_POLL_SECONDS": "0.1",
            "THREADKEEPER_HEARTBEAT_SECONDS": "0.5",
            "THREADKEEPER_LEASE_SECONDS": "6",
            "THREADKEEPER_WORKER_CONCURRENCY": "4",
            "THREADKEEPER_DB_POOL_SIZE": "8",
            "THREADKEEPER_CHECKPOINTER_POOL_SIZE": "8",
            "THREADKEEPER_SUMMARY_THRESHOLD": "1500",
            "THREADKEEPER_TOOL_RESULT_PREVIEW_TOKENS": "100",
            # A budget the start check accepts (keep-recent + summary + prompt + tools + a turn).
            "THREADKEEPER_SUMMARY_KEEP_RECENT_TOKENS": "200",
            "THREADKEEPER_SUMMARY_MAX_TOKENS": "250",
            "THREADKEEPER_LOG_LEVEL": "WARNING",
            "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "unused-local-workdir"),
            **s3_server.env(bucket),
        }
        ports = [free_port(), free_port()]
        apis = [
            app_process(["serve", "--port", str(p)], env, tmp_path / f"api{i}.log")
            for i, p in enumerate(ports)
        ]
        workers = [
            app_process(
                ["worker"],
                {**env, "THREADKEEPER_WORKER_HEARTBEAT_FILE": str(tmp_path / f"w{i}.beat")},
                tmp_path / f"worker{i}.log",
            )
            for i in range(2)
        ]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        with reaped(*apis, *workers):
            await asyncio.gather(
                *(
                    wait_ready(u, p, tmp_path / f"api{i}.log")
                    for i, (u, p) in enumerate(zip(urls, apis, strict=True))
                )
            )
            async with (
                httpx.AsyncClient(base_url=urls[0], headers=AUTH, timeout=60) as api1,
                httpx.AsyncClient(base_url=urls[1], headers=AUTH, timeout=60) as api2,
            ):
                clients = (api1, api2)
                doc = {"title": "Ops", "content": DOC, "url": "https://docs/ops"}
                assert (
                    await api1.post("/v1/knowledge-bases/default/documents", json=doc)
                ).status_code in (200, 201)
                tids = [
                    (await clients[i % 2].post("/v1/threads", json={})).json()["id"]
                    for i in range(THREADS)
                ]
                posted: dict[str, list[str]] = {t: [] for t in tids}

                async def post_all(i: int, tid: str) -> None:
                    for k in range(PER_THREAD):
                        text = f"thread {i} message {k}: when does a lease expire?"
                        # Intake alternates between the APIs; compress attempts go to api1.
                        resp = await clients[(i + k + 1) % 2].post(
                            f"/v1/threads/{tid}/messages", json={"content": text}
                        )
                        assert resp.status_code == 202, resp.text
                        posted[tid].append(text)

                compress_statuses: list[int] = []

                async def compress_attempts() -> None:
                    for n in range(30):
                        tid = tids[n % THREADS]
                        resp = await api1.post(f"/v1/threads/{tid}/context/compress")
                        compress_statuses.append(resp.status_code)
                        assert resp.status_code in (200, 409, 422), resp.text

                await asyncio.gather(
                    *(post_all(i, t) for i, t in enumerate(tids)), compress_attempts()
                )
                victim = workers[0]

                async def victim_mid_run() -> bool:
                    held_by_victim = rows(
                        clean_db,
                        "SELECT count(*) FROM agent_runs WHERE status = 'running' "
                        "AND lease_holder LIKE %s",
                        f"%:{victim.pid}:%",
                    )[0][0]
                    return bool(held_by_victim) and model.held >= 1

                await wait_until(victim_mid_run, "the victim worker mid-run", timeout=120)
                victim.send_signal(signal.SIGKILL)
                assert await wait_exit(victim, 30) == -signal.SIGKILL
                model.gate.set()

                async def all_terminal() -> bool:
                    pending = rows(
                        clean_db,
                        "SELECT (SELECT count(*) FROM agent_run_requests WHERE status = 'queued')"
                        " + (SELECT count(*) FROM agent_runs WHERE status NOT IN "
                        "('completed', 'failed', 'cancelled'))",
                    )[0][0]
                    return pending == 0

                await wait_until(all_terminal, "every request to finish", timeout=180)

                # --- audit -------------------------------------------------------------------
                for tid in tids:
                    users = rows(
                        clean_db,
                        "SELECT m.content, r.status, r.error FROM messages m "
                        "JOIN agent_run_requests q ON q.id = m.request_id "
                        "JOIN agent_runs r ON r.request_id = q.id "
                        "WHERE m.conversation_id = %s AND m.role = 'user' "
                        "ORDER BY m.seq",
                        tid,
                    )
                    # FIFO, nothing lost or duplicated, one terminal run per request.
                    assert [u[0] for u in users] == posted[tid], tid
                    assert all(u[1] in TERMINAL for u in users), users
                    order = rows(
                        clean_db,
                        "SELECT q.seq FROM agent_runs r JOIN agent_run_requests q "
                        "ON q.id = r.request_id WHERE r.conversation_id = %s "
                        "ORDER BY r.created_at",
                        tid,
                    )
                    assert [o[0] for o in order] == sorted(o[0] for o in order), tid
                dupes = rows(
                    clean_db,
                    "SELECT count(*) FROM (SELECT 1 FROM messages WHERE lc_id IS NOT NULL "
                    "GROUP BY conversation_id, lc_id HAVING count(*) > 1) d",
                )[0][0]
                assert dupes == 0
                statuses = dict(
                    rows(clean_db, "SELECT status::text, count(*) FROM agent_runs GROUP BY 1")
                )
                assert sum(statuses.values()) == THREADS * PER_THREAD
                lease_failures = rows(
                    clean_db, "SELECT count(*) FROM agent_runs WHERE error LIKE 'lease expired%%'"
                )[0][0]
                assert lease_failures >= 1  # the kill really hit runs in flight
                assert statuses.get("completed", 0) >= THREADS  # the survivor did the rest

                # Every offloaded original: readable from both APIs, hash matching.
                checked = 0
                for tid in tids:
                    state = (await api2.get(f"/v1/threads/{tid}/agent-state")).json()
                    for m in state["messages"]:
                        if not m.get("offload"):
                            continue
                        path, sha = m["offload"]["path"], m["offload"]["sha256"]
                        for client in clients:
                            f = await client.get(f"/v1/threads/{tid}/workdir/{path}")
                            assert f.status_code == 200, f.text
                            assert hashlib.sha256(f.content).hexdigest() == sha
                            assert f.headers["x-content-sha256"] == sha
                        checked += 1
                assert checked >= THREADS // 2, checked
                # ... and they live in the bucket, not on a local disk.
                listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="workdir/")
                assert listed.get("KeyCount", 0) >= checked
                assert not (tmp_path / "unused-local-workdir").exists() or not any(
                    (tmp_path / "unused-local-workdir").rglob("*.txt")
                )
                assert any(s == 409 for s in compress_statuses) or 200 in compress_statuses
