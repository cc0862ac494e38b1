"""The thread's offload index and search_workdir: every original findable, offsets followable."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from app.compression.offload import deterministic_pass
from app.compression.recall import _enclosing_result, index_fields, search_workdir
from app.compression.retrieval import identity_of
from app.compression.tokens import TokenCounter
from app.compression.workdir import INDEX_PATH, MemoryIndex, Workdir, WorkdirIndexError

FACT = "Separately, master key rotation happens each 41 days under policy ZX-7."


def kb_text(tag: str, fact_at: int | None = None) -> str:
    results = [
        {
            "id": f"{tag}-{i}",
            "doc_id": f"doc-{tag}",
            "source": f"kb/{tag}/{i}.md",
            "title": f"{tag} title {i}",
            "url": f"https://kb.example/{tag}/{i}",
            "score": 0.5,
            "content": (FACT if i == fact_at else "Leases renew on heartbeat. ") * 3,
        }
        for i in range(6)
    ]
    return json.dumps({"query": tag, "count": 6, "results": results})


def dify_text(tag: str) -> str:
    return json.dumps(
        [
            {
                "content": FACT if i == 2 else "Unrelated chunk text.",
                "score": 0.4,
                "metadata": {"source": f"{tag}.pdf", "chunk_id": f"{tag}-c{i}", "file_id": "f1"},
            }
            for i in range(4)
        ]
    )


async def offload(
    workdir: Workdir, thread: str, call: str, text: str, tool: str = "query_kb"
) -> None:
    await workdir.write_tool_result(
        thread, call, text, index=index_fields(tool, {"query": call}, text)
    )


async def test_index_lists_every_original_once_with_its_identities(tmp_path: Path) -> None:
    workdir = Workdir(tmp_path)
    await offload(workdir, "t", "c1", kb_text("a"))
    await offload(
        workdir, "t", "c2", "plain log line see https://logs.example/x for more", "run_shell"
    )
    await offload(workdir, "t", "c1", kb_text("a"))  # the same original again: not indexed twice
    index = await workdir.read_index("t")
    assert [e["path"] for e in index] == ["tool-results/c1.txt", "tool-results/c2.txt"]
    first, second = index
    assert first["tool"] == "query_kb" and first["args"] == {"query": "c1"}
    assert first["ids"][:2] == ["a-0", "doc-a"]
    assert first["urls"] == [f"https://kb.example/a/{i}" for i in range(6)]
    assert first["titles"][0] == "a title 0"
    assert first["sha256"] == (await workdir.read_text("t", "tool-results/c1.txt"))[2]
    assert second["urls"] == ["https://logs.example/x"] and second["ids"] == []
    assert await workdir.read_index("never-offloaded") == []
    # The model reads the index as index.jsonl: one JSON line per original, oldest first.
    listing, _, _ = await workdir.read_text("t", INDEX_PATH)
    assert [json.loads(line) for line in listing.splitlines()] == index
    assert INDEX_PATH in await workdir.list_files("t")
    assert INDEX_PATH not in await workdir.list_files("never-offloaded")


class RefusingIndex(MemoryIndex):
    """An index that cannot store anything (a full disk, a lost database)."""

    async def add(self, *args: object, **kwargs: object) -> None:
        raise WorkdirIndexError("the index refuses")


async def test_failed_index_append_shrinks_nothing(tmp_path: Path) -> None:
    workdir = Workdir(tmp_path, RefusingIndex())
    with pytest.raises(WorkdirIndexError):
        await offload(workdir, "t", "c1", kb_text("a"))
    messages: list[BaseMessage] = [
        AIMessage("", tool_calls=[{"name": "query_kb", "args": {}, "id": "c9"}]),
        ToolMessage(kb_text("b") * 3, tool_call_id="c9", name="query_kb", id="m9"),
    ]
    failures: list[str] = []
    view, offloaded = await deterministic_pass(
        messages,
        thread_id="t",
        workdir=workdir,
        counter=TokenCounter(),
        preview_tokens=50,
        failures=failures,
    )
    assert offloaded == [] and view == messages
    assert failures == ["workdir index unavailable"]


async def test_search_finds_a_phrase_with_offsets_that_read_back(tmp_path: Path) -> None:
    workdir = Workdir(tmp_path)
    await offload(workdir, "t", "c1", kb_text("a"))
    await offload(workdir, "t", "c2", kb_text("b", fact_at=4))
    await offload(workdir, "t", "c3", kb_text("c"))
    await offload(workdir, "other", "c2", kb_text("z", fact_at=1))  # another thread: never searched
    hits = await search_workdir(workdir, "t", "policy zx-7")
    assert [h.path for h in hits] == ["tool-results/c2.txt"]
    hit = hits[0]
    text, _, sha = await workdir.read_text(
        "t", hit.path, offset=hit.offset, limit=hit.end - hit.offset
    )
    assert text == hit.snippet and "policy ZX-7" in hit.snippet and hit.sha256 == sha
    assert hit.result == {
        "id": "b-4",
        "source": "kb/b/4.md",
        "title": "b title 4",
        "url": "https://kb.example/b/4",
    }
    assert hit.passage is not None and FACT[:40] in hit.passage and '"' not in hit.passage


async def test_search_ranks_by_distinct_terms_and_reads_other_shapes(tmp_path: Path) -> None:
    workdir = Workdir(tmp_path)
    await offload(workdir, "t", "c1", kb_text("a"))  # "renew" only
    await offload(workdir, "t", "c2", dify_text("manual"))
    await offload(workdir, "t", "c3", "rotation notes: nothing about keys here\n" * 20, "run_shell")
    hits = await search_workdir(workdir, "t", "How often does master key rotation happen?")
    assert hits[0].path == "tool-results/c2.txt"
    assert set(hits[0].matched) >= {"master", "key", "rotation", "happen"}
    assert hits[0].result is not None and hits[0].result["id"] == "manual-c2"
    assert hits[0].result["source"] == "manual.pdf"
    assert [h.path for h in hits[1:]] == ["tool-results/c3.txt"]  # fewer terms, no JSON result
    assert hits[1].result is None
    assert await search_workdir(workdir, "t", "quantum entanglement") == []
    assert await search_workdir(workdir, "t", "  ") == []


def _enclosing_by_characters(text: str, position: int) -> dict[str, str] | None:
    """The reference: the same rule walked character by character (strings and escapes
    tracked one character at a time)."""
    if text.lstrip()[:1] not in ("[", "{"):
        return None
    stack: list[int] = []
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            stack.append(index)
        elif char == "}" and stack:
            start = stack.pop()
            if start <= position <= index:
                try:
                    value = json.loads(text[start : index + 1])
                except ValueError:
                    return None
                identity = identity_of(value) if isinstance(value, dict) else {}
                if identity:
                    return identity
    return None


def test_enclosing_result_equals_the_character_walk() -> None:
    """The result a passage sits in, found by skipping whole strings, is the one a walk over
    every character finds: on real results (quotes, braces and escapes inside strings) and on
    random, often broken, JSON-like text (strings left open, a trailing backslash)."""
    rng = random.Random(23)
    texts = [kb_text("t", fact_at=2), dify_text("d")]
    for _ in range(40):
        rows = [
            {"id": f"r{j}", "title": 't"{x}\\', "content": "c {} " * rng.randint(0, 3)}
            for j in range(rng.randint(0, 3))
        ]
        texts.append(json.dumps({"results": rows}, ensure_ascii=rng.random() < 0.5))
    pieces = ["{", "}", '"', "\\", "a", " ", ":", ",", "[", "\n", "é", '"id"', '"r-1"', '\\"']
    pieces.append('{"id": "x", "content": "a{b}c"}')
    for _ in range(1500):
        start = rng.choice(["{", "[", " {", ""])
        texts.append(start + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30))))
    for text in texts:
        for position in range(-1, len(text) + 1):
            expected = _enclosing_by_characters(text, position)
            assert _enclosing_result(text, position) == expected, (text, position)
