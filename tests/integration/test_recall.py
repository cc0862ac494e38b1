"""Total recall: a fact only an old, summarized-away tool result held is still answered, with
its source, through the thread's offload index and ``search_workdir`` (real PostgreSQL, app)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from app.compression.workdir import INDEX_PATH
from app.db.urls import libpq_url
from tests.conftest import AUTH, AppFactory, AppHarness
from tests.support.api import add_doc, messages, new_thread, run_turns, state
from tests.support.corpus import BIG_DOC

pytestmark = pytest.mark.integration

VAULT_DOC = (
    "Audit log exports run nightly to the archive bucket. "
    "Separately, master key rotation happens each 41 days under policy ZX-7."
)


async def answer_of_last_turn(h: AppHarness, tid: str) -> list[dict[str, Any]]:
    """The messages after the thread's last user message."""
    history = await messages(h, tid)
    asked = max(i for i, m in enumerate(history) if m["role"] == "user")
    return history[asked + 1 :]


def tool_calls(turn: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for m in turn for c in (m.get("tool_calls") or [])]


async def test_fact_from_a_summarized_away_result_is_answered_with_its_source(
    app_factory: AppFactory, clean_db: str
) -> None:
    async with app_factory(
        summary_threshold=3000, tool_result_preview_tokens=300, summary_keep_recent_tokens=400
    ) as h:
        vault = await add_doc(h, VAULT_DOC, title="Vault handbook")
        await add_doc(h, BIG_DOC, title="Leases")
        tid = await new_thread(h)
        await run_turns(h, tid, ["When do audit log exports run?"])
        first = await messages(h, tid)
        tool_result = next(m for m in first if m["role"] == "tool")
        assert "41 days" in tool_result["content"]
        assert "41 days" not in first[-1]["content"]  # the answer quoted the export sentence
        chunk_id = json.loads(tool_result["content"])["results"][0]["id"]
        # Bury that result under many turns, then take the document out of the knowledge base
        # so query_kb can no longer answer: only the thread's own old tool result holds the fact.
        await run_turns(h, tid, [f"how does lease {i} expire?" for i in range(8)])
        with psycopg.connect(libpq_url(clean_db), autocommit=True) as conn:
            conn.execute("DELETE FROM kb_documents WHERE id = %s", (vault["id"],))
        view = await state(h, tid)
        assert view["summary"]["present"]
        visible = "\n".join(m["content"] for m in view["messages"])
        assert "41 days" not in visible
        assert INDEX_PATH in visible and "search_workdir" in visible

        await run_turns(h, tid, ["How often does master key rotation happen?"])
        last_turn = await answer_of_last_turn(h, tid)
        assert tool_calls(last_turn) == ["query_kb", "search_workdir"], last_turn
        answer = last_turn[-1]["content"]
        assert "41 days" in answer
        assert f"[kb:{chunk_id}]" in answer
        assert "tool-results/" in answer
        # The cited path and offsets lead back to the original text.
        hits = json.loads(last_turn[-2]["content"])["hits"]
        top = hits[0]
        resp = await h.client.get(f"/v1/threads/{tid}/workdir/{top['path']}", headers=AUTH)
        assert resp.status_code == 200
        assert resp.text[top["offset"] : top["end"]] == top["snippet"]
        assert "41 days" in top["snippet"]


async def test_searches_that_found_nothing_are_not_recalled_as_answers(
    app_factory: AppFactory, clean_db: str
) -> None:
    """An empty knowledge base: every ``query_kb`` output only echoes its query. Once such
    outputs are summarized away, a question like the earlier ones makes the model search the
    Workdir; the echoed questions are not content, so the search finds nothing and the answer
    says so instead of quoting an earlier question as if it were a result."""
    async with app_factory(
        summary_threshold=3000, tool_result_preview_tokens=300, summary_keep_recent_tokens=400
    ) as h:
        tid = await new_thread(h)
        await run_turns(h, tid, [f"when does lease {i} expire?" for i in range(40)])
        view = await state(h, tid)
        assert view["summary"]["present"]
        with psycopg.connect(libpq_url(clean_db), autocommit=True) as conn:
            (indexed,) = conn.execute("SELECT count(*) FROM workdir_index").fetchone() or (0,)
            (echoing,) = conn.execute(
                "SELECT count(*) FROM workdir_index WHERE tsv @@ 'lease'::tsquery"
            ).fetchone() or (0,)
        assert indexed > 0  # the empty outputs were kept as originals all the same
        assert echoing == 0  # but the questions they echo are not indexed as their content

        await run_turns(h, tid, ["when does lease 99 expire?"])
        last_turn = await answer_of_last_turn(h, tid)
        assert tool_calls(last_turn) == ["query_kb", "search_workdir"], last_turn
        search = json.loads(
            next(m for m in last_turn if m["role"] == "tool" and "hits" in m["content"])["content"]
        )
        assert search["hits"] == [], search
        answer = last_turn[-1]["content"]
        assert answer.startswith("I found nothing relevant"), answer
