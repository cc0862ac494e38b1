"""Issue 22 items 7 and 8: queries whose cost must not grow with the history of finished runs.

Wall time at 300,000 runs is not a test; the plan is. A few thousand finished runs seeded in SQL
and ANALYZEd make a sequential scan of ``agent_runs`` the planner's choice wherever no index
serves the query, so an index scan here is the planner's own proof. The statements checked are
the ones the service really sent (captured on its engine), with their real parameters.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from app.db.urls import libpq_url
from tests.support.app_harness import AUTH, AppFactory
from tests.support.statements import sent_statements

pytestmark = pytest.mark.integration

FINISHED_RUNS = 4000


def _seed_history(url: str) -> tuple[str, list[str]]:
    """One thread of alice's with FINISHED_RUNS completed runs (a request each) and one running
    run; returns the thread id and the request ids, oldest first."""
    thread_id = str(uuid.uuid4())
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO conversations (id, owner_id, agent_id, title) "
            "VALUES (%s, 'alice', 'default', 'history')",
            (thread_id,),
        )
        conn.execute(
            "INSERT INTO agent_run_requests (id, conversation_id, seq, payload, status) "
            "SELECT gen_random_uuid(), %s, n, jsonb_build_object('message_id', gen_random_uuid(), "
            "'lc_id', gen_random_uuid(), 'content', 'q'), 'dispatched' "
            "FROM generate_series(1, %s) AS n",
            (thread_id, FINISHED_RUNS + 1),
        )
        conn.execute(
            "INSERT INTO agent_runs (id, conversation_id, request_id, status, started_at, "
            "finished_at) SELECT gen_random_uuid(), conversation_id, id, "
            "CASE WHEN seq <= %s THEN 'completed' ELSE 'running' END::run_status, now(), "
            "CASE WHEN seq <= %s THEN now() - seq * interval '1 minute' END "
            "FROM agent_run_requests WHERE conversation_id = %s",
            (FINISHED_RUNS, FINISHED_RUNS, thread_id),
        )
        conn.execute("ANALYZE agent_runs")
        conn.execute("ANALYZE agent_run_requests")
        rows = conn.execute(
            "SELECT id FROM agent_run_requests WHERE conversation_id = %s ORDER BY seq",
            (thread_id,),
        ).fetchall()
    return thread_id, [str(r[0]) for r in rows]


def _generic_plan(url: str, statement: str, parameters: Any) -> dict[str, Any]:
    """The plan PostgreSQL reuses for a captured statement once it is a cached prepared
    statement (asyncpg prepares and caches each one per connection; after five executions the
    server may switch to this generic plan, which cannot assume the parameters' values)."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(sql.SQL("PREPARE captured AS ") + sql.SQL(statement))  # type: ignore[arg-type]
        call = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE captured")
        if parameters:
            call += sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Literal, parameters)))
        [[plan]] = conn.execute(call).fetchall()
    return plan[0]["Plan"]  # type: ignore[no-any-return]


def _scans(plan: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """(node type, relation, index) of every scan node in ``plan`` (a bitmap heap scan is
    named by the index of its bitmap index scan)."""
    found = []
    if "Relation Name" in plan:
        index = plan.get("Index Name")
        if plan["Node Type"] == "Bitmap Heap Scan":
            index = next((c.get("Index Name") for c in plan.get("Plans", [])), None)
        found.append((plan["Node Type"], plan["Relation Name"], index))
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


def _tables_read(statement: str) -> set[str]:
    return {t for t in ("agent_runs", "agent_run_requests") if f"FROM {t}" in statement}


async def test_get_request_finds_its_run_through_the_request_id_index(
    app_factory: AppFactory, clean_db: str
) -> None:
    async with app_factory(start_worker=False) as h:
        _, requests = _seed_history(clean_db)
        engine = h.container.engine
        with sent_statements(engine) as seen:
            got = await h.client.get(f"/v1/requests/{requests[10]}", headers=AUTH)
        assert got.status_code == 200, got.text
        assert got.json()["run_status"] == "completed"
        lookups = [(s, p) for s, p in seen if "agent_runs.request_id =" in s]
        assert lookups, seen
        for statement, parameters in lookups:
            scans = _scans(_generic_plan(clean_db, statement, parameters))
            on_runs = [s for s in scans if s[1] == "agent_runs"]
            assert on_runs and all(
                index == "ix_agent_runs_request_id" for _, _, index in on_runs
            ), scans


def test_deleting_a_request_checks_its_runs_through_the_index(clean_db: str) -> None:
    """DeleteThread cascades to the thread's requests; for each one PostgreSQL's foreign-key
    trigger looks for runs still pointing at it with this query (ri_triggers.c), planned once
    and reused (a generic plan, hence ``force_generic_plan``)."""
    _, requests = _seed_history(clean_db)
    with psycopg.connect(libpq_url(clean_db), autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(
            'PREPARE ri_check(uuid) AS SELECT 1 FROM ONLY "public"."agent_runs" x '
            'WHERE $1 OPERATOR(pg_catalog.=) "request_id" FOR KEY SHARE OF x'
        )
        [[plan]] = conn.execute(
            f"EXPLAIN (FORMAT JSON) EXECUTE ri_check('{requests[0]}')"
        ).fetchall()
    scans = _scans(plan[0]["Plan"])
    assert scans == [("Index Scan", "agent_runs", "ix_agent_runs_request_id")], scans


async def test_metrics_scrape_reads_no_finished_run(app_factory: AppFactory, clean_db: str) -> None:
    async with app_factory(start_worker=False) as h:
        _seed_history(clean_db)
        engine = h.container.engine
        with sent_statements(engine) as seen:
            scraped = await h.client.get("/metrics")
        assert scraped.status_code == 200
        counted = [(s, p) for s, p in seen if _tables_read(s)]
        assert {t for s, _ in counted for t in _tables_read(s)} == {
            "agent_runs",
            "agent_run_requests",
        }, seen
        # Only the partial indexes of running/interrupted runs and of queued requests: neither
        # finished runs nor dispatched requests are read, however many there are.
        partial = {
            "agent_runs": "uq_agent_runs_one_active_per_thread",
            "agent_run_requests": "ix_requests_queued",
        }
        for statement, parameters in counted:
            scans = _scans(_generic_plan(clean_db, statement, parameters))
            assert scans and all(index == partial[table] for _, table, index in scans), (
                statement,
                scans,
            )
        assert 'threadkeeper_runs{status="running"} 1.0' in scraped.text
        assert 'threadkeeper_runs{status="completed"}' not in scraped.text


def _seed_idle_threads(url: str, threads: int) -> None:
    """``threads`` idle threads of alice's, each with one answered request and its finished run
    (what a long-lived deployment mostly holds), then ANALYZEd."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO conversations (id, owner_id, agent_id, title) "
            "SELECT gen_random_uuid(), 'alice', 'default', 'idle' FROM generate_series(1, %s)",
            (threads,),
        )
        conn.execute(
            "INSERT INTO agent_run_requests (id, conversation_id, seq, payload, status) "
            "SELECT gen_random_uuid(), id, 1, '{}'::jsonb, 'dispatched' FROM conversations"
        )
        conn.execute(
            "INSERT INTO agent_runs (id, conversation_id, request_id, status, started_at, "
            "finished_at) SELECT gen_random_uuid(), conversation_id, id, 'completed', now(), "
            "now() FROM agent_run_requests"
        )
        for table in ("conversations", "agent_run_requests", "agent_runs"):
            conn.execute(f"ANALYZE {table}")


async def test_a_claim_reads_the_queue_not_the_threads(
    app_factory: AppFactory, clean_db: str
) -> None:
    """Issue 23 item 1: the claim finds the heads of the queues through the partial index of
    queued requests and each candidate's runs through their indexes; no table is scanned
    whole (the old claim ran a sub-plan per thread over all of ``conversations``). The loop's
    other looks (expired leases, runs handed back) read only the partial index of active runs,
    even as cached generic plans."""
    async with app_factory(start_worker=False) as h:
        _seed_idle_threads(clean_db, FINISHED_RUNS)
        tid = (await h.client.post("/v1/threads", json={}, headers=AUTH)).json()["id"]
        posted = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "q"}, headers=AUTH
        )
        assert posted.status_code == 202, posted.text
        worker = h.container.worker
        with sent_statements(h.container.engine) as seen:
            # One claim round of the loop: the lease check, runs handed back, the queue.
            assert await worker.recover_expired() == 0
            assert await worker.claims.claim_resumable() is None
            loop_looks = len(seen)
            claimed = await worker.claim_next()
        assert claimed is not None and str(claimed.thread_id) == tid
        for statement, parameters in seen:
            scans = _scans(_generic_plan(clean_db, statement, parameters))
            assert not [s for s in scans if s[0] == "Seq Scan"], (statement, scans)
        for statement, parameters in seen[:loop_looks]:
            # The look reads the partial index; what a one-statement claim of a run handed
            # back then writes (the run, its event, its thread's owner) goes by primary key.
            scans = _scans(_generic_plan(clean_db, statement, parameters))
            looks = [(t, i) for node, t, i in scans if node != "ModifyTable"]
            assert ("agent_runs", "uq_agent_runs_one_active_per_thread") in looks, scans
            assert all(
                i == "uq_agent_runs_one_active_per_thread" or (i or "").startswith("pk_")
                for _, i in looks
            ), (statement, scans)
        # (A run handed back reads its request's payload by primary key in the loop's look.)
        claim = [(s, p) for s, p in seen[loop_looks:] if "agent_run_requests" in s]
        assert len(claim) == 2, seen  # the look (lock the thread), the dispatch and start
        for statement, parameters in claim:
            scans = _scans(_generic_plan(clean_db, statement, parameters))
            on_requests = {
                index
                for node, table, index in scans
                if table == "agent_run_requests" and node != "ModifyTable"
            }
            assert on_requests <= {"ix_requests_queued", "agent_run_requests_pkey"}, scans
        look = _scans(_generic_plan(clean_db, *claim[0]))
        assert ("Index Scan", "agent_run_requests", "ix_requests_queued") in look, look
