"""Previews that replace offloaded tool results: identity of every result survives."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from app.compression.offload import PREVIEW_CHARS_PER_TOKEN, deterministic_pass
from app.compression.previews import (
    build_preview,
    generic_preview,
    preview_header,
    preview_result_ids,
    structured_preview,
)
from app.compression.tokens import TokenCounter
from app.compression.workdir import OffloadRecord, Workdir
from app.config import Settings
from app.repositories.knowledge_base import KbHit
from app.services.knowledge_base import kb_payload

BUDGET = 2400


def record_for(tmp_path: Path, text: str, call_id: str = "call_1") -> OffloadRecord:
    return asyncio.run(Workdir(tmp_path).write_tool_result("thread", call_id, text))


def query_kb_payload(n: int = 50, words: int = 120) -> dict[str, Any]:
    return {
        "query": "retention policy",
        "count": n,
        "results": [
            {
                "id": f"chunk-{i:03d}",
                "doc_id": f"doc-{i % 7}",
                "source": f"handbook/section-{i}.md",
                "title": f"Section {i}: retention rules",
                "url": f"https://kb.example.com/docs/{i}?anchor=r{i}",
                "score": round(0.99 - i * 0.013, 6),
                "content": " ".join(f"word{i}_{j}" for j in range(words)),
            }
            for i in range(n)
        ],
    }


def test_header_names_file_size_digest_and_reader(tmp_path: Path) -> None:
    text = "x" * 5000
    record = record_for(tmp_path, text)
    header = preview_header(record)
    assert "tool-results/call_1.txt" in header
    assert f"{record.chars} chars" in header
    assert "bytes" not in header  # ASCII: bytes == chars, said once
    assert header.count("tool-results/call_1.txt") == 1  # the path once
    assert hashlib.sha256((tmp_path / record.key).read_bytes()).hexdigest() in header
    assert "read_workdir_file(path, offset=0, limit=5000)" in header
    wide = record_for(tmp_path, "\u00e9" * 3000, "call_2")
    assert wide.bytes != wide.chars
    assert f"({wide.chars} chars, {wide.bytes} bytes," in preview_header(wide)


def test_generic_preview_head_middle_tail_with_omitted_counts(tmp_path: Path) -> None:
    text = "".join(f"line {i:05d}\n" for i in range(4000))
    record = record_for(tmp_path, text)
    preview = generic_preview(text, record, BUDGET)
    assert preview.startswith(preview_header(record))
    assert len(preview) < BUDGET + 400
    assert text[:200] in preview and text[-200:] in preview
    gaps = [int(g) for g in re.findall(r"\[\.\.\. (\d+) chars omitted \.\.\.\]", preview)]
    assert len(gaps) == 2
    spans = re.findall(r"chars (\d+)-(\d+)\) ---", preview)
    shown = sum(int(b) - int(a) for a, b in spans)
    assert shown + sum(gaps) == len(text)
    middle_start = int(spans[1][0])
    assert text[middle_start : middle_start + 50] in preview


def test_structured_preview_keeps_all_50_results_in_order(tmp_path: Path) -> None:
    payload = query_kb_payload(50)
    text = json.dumps(payload)
    record = record_for(tmp_path, text)
    preview = structured_preview("query_kb", text, record, BUDGET)
    assert preview is not None
    assert preview.startswith(preview_header(record, tool_name="query_kb"))
    assert "50 results" in preview and '"retention policy"' in preview
    positions = []
    for result in payload["results"]:
        for key in ("id", "doc_id", "source", "url"):
            assert str(result[key]) in preview, (key, result[key])
        assert f"| {result['title']} |" in preview
        positions.append(
            preview.index(f"{result['id']} {result['doc_id']} {json.dumps(result['score'])} |")
        )
    assert positions == sorted(positions)
    assert preview_result_ids(preview) == [r["id"] for r in payload["results"]]
    assert len(preview) < len(text) / 3


def test_identity_lines_are_token_lean(tmp_path: Path) -> None:
    """Every later request re-sends each preview, so its per-result identity costs tokens on
    every turn: the key names once in a legend line, then one line per result with the id and
    score values in that order, then source | title | url by position (no per-result key
    names or numbers, no quotes unless a value needs them, no text-length notes)."""
    payload = query_kb_payload(20)
    text = json.dumps(payload)
    preview = structured_preview("query_kb", text, record_for(tmp_path, text), 0)
    assert preview is not None
    assert preview.splitlines()[1].endswith(
        "; in order, one result per line: id doc_id score | source | title | url"
    )
    lines = preview.splitlines()[2:]
    assert len(lines) == 20
    for line, r in zip(lines, payload["results"], strict=True):
        assert line == (
            f"{r['id']} {r['doc_id']} {json.dumps(r['score'])}"
            f" | {r['source']} | {r['title']} | {r['url']}"
        )


def test_ambiguous_values_are_quoted_and_read_back(tmp_path: Path) -> None:
    """A value that could pass for two columns, a separator or an absent value is JSON-quoted;
    a result lacking a key shows ``-`` in that column."""
    results = [
        {
            "id": "two words",
            "score": 0.5,
            "title": "A | B",
            "url": "https://a.example",
            "content": "x",
        },
        {"id": "-", "doc_id": "d1", "title": "-", "source": "a|b.md", "content": "y"},
        {"id": "plain", "score": 0.25, "title": "Plain title", "content": "z"},
    ]
    text = json.dumps({"results": results})
    preview = structured_preview("query_kb", text, record_for(tmp_path, text), 0)
    assert preview is not None
    lines = preview.splitlines()
    assert lines[1].endswith("one result per line: id doc_id score | source | title | url")
    assert lines[2] == '"two words" - 0.5 | - | "A | B" | https://a.example'
    assert lines[3] == '"-" d1 - | "a|b.md" | "-" | -'
    assert lines[4] == "plain - 0.25 | - | Plain title | -"
    assert preview_result_ids(preview) == ["two words", "-", "plain"]
    assert preview_result_ids(preview, "doc_id") == ["d1"]
    assert preview_result_ids("no legend here") is None


def test_structured_preview_shrinks_snippets_to_budget(tmp_path: Path) -> None:
    payload = query_kb_payload(5, words=2000)
    text = json.dumps(payload)
    record = record_for(tmp_path, text)
    small = structured_preview("query_kb", text, record, 2000)
    large = structured_preview("query_kb", text, record, 8000)
    assert small is not None and large is not None
    assert len(small) <= 2000 + 200
    assert len(small) < len(large) <= 8000 + 200
    assert "word0_0" in small  # each result still shows the start of its text


def test_dify_style_chunk_list(tmp_path: Path) -> None:
    chunks = [
        {
            "content": f"chunk body {i} " * 80,
            "score": 0.5 + i / 100,
            "bm25_score": 11.5 - i,
            "rerank_score": 0.9 - i / 50,
            "metadata": {
                "source": f"policy-{i}.pdf",
                "chunk_id": f"c-{i}",
                "file_id": f"f-{i // 2}",
                "chunk_index": i,
                "filepath": f"/data/kb/policy-{i}.pdf",
            },
        }
        for i in range(12)
    ]
    text = json.dumps(chunks)
    preview = structured_preview("query_kb", text, record_for(tmp_path, text), BUDGET)
    assert preview is not None and "12 results" in preview
    for i, chunk in enumerate(chunks):
        meta = chunk["metadata"]
        scores = " ".join(json.dumps(chunk[k]) for k in ("score", "bm25_score", "rerank_score"))
        assert (
            f"\n{meta['chunk_id']} {meta['file_id']} {i} {scores}"
            f" | {meta['source']} | - | - filepath={meta['filepath']}\n"
        ) in preview
    assert "chunk_id file_id chunk_index score bm25_score rerank_score | source" in preview
    assert preview_result_ids(preview, "chunk_id") == [c["metadata"]["chunk_id"] for c in chunks]


def test_tavily_shape_with_answer(tmp_path: Path) -> None:
    payload = {
        "query": "langgraph checkpoints",
        "answer": "Checkpoints store the graph state per thread.",
        "results": [
            {
                "title": f"Result {i}",
                "url": f"https://site{i}.example.org/page",
                "content": f"content {i} " * 100,
                "score": 0.8 - i / 100,
                "raw_content": "raw " * 3000,
            }
            for i in range(8)
        ],
        "response_time": 1.2,
    }
    text = json.dumps(payload)
    preview = structured_preview("tavily_search", text, record_for(tmp_path, text), BUDGET)
    assert preview is not None
    assert "answer: Checkpoints store the graph state per thread." in preview
    for result in payload["results"]:
        assert f"{json.dumps(result['score'])} | - | {result['title']} | {result['url']} " in (
            preview
        )
    assert "raw_content 12000 chars" in preview
    assert "raw raw raw" not in preview


def test_searxng_shape(tmp_path: Path) -> None:
    payload = {
        "query": "q",
        "number_of_results": 3,
        "results": [
            {"title": f"T{i}", "url": f"https://s{i}.example", "content": "c " * 400, "score": i}
            for i in range(3)
        ],
    }
    text = json.dumps(payload)
    preview = structured_preview("web_search", text, record_for(tmp_path, text), BUDGET)
    assert preview is not None
    assert all(f"\n{i} | - | T{i} | https://s{i}.example" in preview for i in range(3))


@pytest.mark.parametrize(
    "text",
    [
        '{"results": [{"id": 1, "content": "trunc',  # cut-off JSON
        "not json at all " * 500,
        json.dumps({"status": "ok", "rows": 3}),  # JSON but no result list
        json.dumps([1, 2, 3]),
    ],
)
def test_unrecognised_falls_back_to_generic(tmp_path: Path, text: str) -> None:
    record = record_for(tmp_path, text)
    assert structured_preview("query_kb", text, record, BUDGET) is None
    assert build_preview("query_kb", text, record, BUDGET) == generic_preview(text, record, BUDGET)


def test_build_preview_uses_structured_for_known_shapes(tmp_path: Path) -> None:
    text = json.dumps(query_kb_payload(3))
    record = record_for(tmp_path, text)
    assert build_preview("query_kb", text, record, BUDGET) == structured_preview(
        "query_kb", text, record, BUDGET
    )


# --- snippets within the budget (issue 10) --------------------------------------------------------
def kb_hits(n: int = 8) -> str:
    """What ``query_kb`` returns at its default limit: real ids, 1200-char chunks (the default
    ``chunk_chars``), highest score first."""
    sentence = "A worker renews its lease with a heartbeat every few seconds while the run lasts. "
    hits = [
        KbHit(
            chunk_id=1000 + i,
            document_id=uuid.UUID(int=i + 1),
            chunk_index=i,
            title=f"Operations handbook, chapter {i}: leases and heartbeats",
            source=f"handbook/operations-{i}.md",
            url=f"https://docs.example.com/operations/{i}#leases",
            content=f"[{i}] " + (sentence * 20)[:1196],
            score=round(0.9 - i * 0.07, 4),
        )
        for i in range(n)
    ]
    return json.dumps(kb_payload("when does a lease expire", hits))


async def test_query_kb_preview_keeps_snippets_at_default_settings(tmp_path: Path) -> None:
    """At the defaults every result's share of the budget fell under the 60-char minimum, so
    the preview kept every id but no text at all."""
    settings = Settings()
    text = kb_hits()
    call = {"name": "query_kb", "args": {"query": "lease"}, "id": "call_kb"}
    history = [
        HumanMessage(content="when does a lease expire?", id="h1"),
        AIMessage(content="", tool_calls=[call], id="a1"),
        ToolMessage(content=text, tool_call_id="call_kb", name="query_kb", id="t1"),
    ]
    view, offloaded = await deterministic_pass(
        history,
        thread_id="thread",
        workdir=Workdir(tmp_path),
        counter=TokenCounter(),
        preview_tokens=settings.compression.tool_result_preview_tokens,
    )
    assert len(offloaded) == 1
    preview = str(view[2].content)
    results = json.loads(text)["results"]
    lines = preview.splitlines()
    # Every result keeps its identity, in order ...
    positions = [preview.index(f"\n{r['id']} {r['doc_id']} ") for r in results]
    assert positions == sorted(positions)
    # ... and the best-scored ones keep a bounded piece of their text, right below their line.
    rows = [
        k
        for k, line in enumerate(lines)
        if line.split(" ", 1)[0] in {str(r["id"]) for r in results}
    ]
    assert len(rows) == len(results)
    snippets = {
        number: lines[k + 1][len("    > ") :]
        for number, k in enumerate(rows, start=1)
        if k + 1 < len(lines) and lines[k + 1].startswith("    > ")
    }
    assert len(snippets) >= 2, preview
    assert sorted(snippets) == list(range(1, len(snippets) + 1))  # scores descend in this list
    for number, snippet in snippets.items():
        assert snippet.startswith(f"[{number - 1}] A worker renews its lease"), snippet
        assert len(snippet) < 1_200
    assert (
        len(preview)
        <= settings.compression.tool_result_preview_tokens * PREVIEW_CHARS_PER_TOKEN + 100
    )


def test_snippets_go_to_the_best_scored_results_in_original_order(tmp_path: Path) -> None:
    # A reranked list: positions and scores disagree.
    scores = [0.2, 0.9, 0.1, 0.8, 0.5, 0.3]
    payload = {
        "results": [
            {"id": f"r{i}", "score": s, "content": f"text of r{i} " + "z" * 800}
            for i, s in enumerate(scores)
        ]
    }
    text = json.dumps(payload)
    record = record_for(tmp_path, text)
    fixed = structured_preview("query_kb", text, record, 0)
    assert fixed is not None and "    > " not in fixed  # no room: identities only
    room = len(fixed) + 300  # room for three minimal snippets, not four
    preview = structured_preview("query_kb", text, record, room)
    assert preview is not None
    shown = re.findall(r"> text of (r\d)", preview)
    assert shown == ["r1", "r3", "r4"]  # the three best, in the list's own order
    assert len(preview) <= room
    assert preview_result_ids(preview) == [f"r{i}" for i in range(6)]

    # ``distance`` ranks the other way round; short texts leave room for more results.
    near = [
        {"id": "far", "distance": 0.9, "content": "far text " * 100},
        {"id": "near", "distance": 0.1, "content": "near text " * 100},
        {"id": "tiny", "distance": 0.5, "content": "tiny"},
    ]
    text = json.dumps(near)
    record = record_for(tmp_path, text, "call_2")
    fixed = structured_preview("query_kb", text, record, 0)
    assert fixed is not None
    preview = structured_preview("query_kb", text, record, len(fixed) + 200)
    assert preview is not None
    assert "> near text" in preview and "> tiny" in preview and "> far text" not in preview
