"""The generated threads of ``benchmarks/compression.py``: tool-heavy agent turns (question, tool
call, tool result, answer) whose results are retrieval-style ``query_kb`` JSON, Dify-style chunk
lists or generic log text, grown to a raw token count, with every result id and URL they hold."""

from __future__ import annotations

import json
import random
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from app.compression.tokens import TokenCounter

_VOCABULARY = (
    "retention policy archive ledger invoice customer region backup replica latency quota "
    "contract renewal audit storage encryption key rotation incident review deployment canary "
    "rollback schema migration index vacuum checkpoint thread budget token summary offload"
)
WORDS = _VOCABULARY.split()


# --- generated threads --------------------------------------------------------------------------
def _prose(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def kb_result(rng: random.Random, turn: int, dify: bool) -> tuple[str, list[str], list[str]]:
    """A retrieval result (our query_kb shape or a Dify/Milvus chunk list) and its ids/URLs."""
    n = 20
    ids = [f"t{turn:03d}-chunk-{i:02d}" for i in range(n)]
    urls = [f"https://kb.example.com/t{turn}/doc{i}" for i in range(n)]
    if dify:
        payload: Any = [
            {
                "content": _prose(rng, 110),
                "score": round(rng.random(), 4),
                "rerank_score": round(rng.random(), 4),
                "metadata": {
                    "source": urls[i],
                    "chunk_id": ids[i],
                    "file_id": f"file-{turn}-{i // 4}",
                    "chunk_index": i,
                    "filepath": f"/kb/t{turn}/doc{i}.md",
                },
            }
            for i in range(n)
        ]
    else:
        payload = {
            "query": _prose(rng, 5),
            "count": n,
            "results": [
                {
                    "id": ids[i],
                    "doc_id": f"doc-{turn}-{i // 4}",
                    "source": f"handbook/t{turn}/{i}.md",
                    "title": f"Turn {turn} document {i}",
                    "url": urls[i],
                    "score": round(1 - i / 40, 4),
                    "content": _prose(rng, 110),
                }
                for i in range(n)
            ],
        }
    return json.dumps(payload), ids, urls


def log_output(rng: random.Random, turn: int) -> str:
    return "\n".join(
        f"2025-01-{turn % 28 + 1:02d}T10:{i // 60:02d}:{i % 60:02d} INFO worker-{i % 7} "
        f"{_prose(rng, 12)}"
        for i in range(140)
    )


Turn = tuple[HumanMessage, AIMessage, ToolMessage, AIMessage]


def generate_thread(
    target_tokens: int, seed: int, *, max_turns: int | None = None, kb_only: bool = False
) -> tuple[list[Turn], set[str], set[str]]:
    """Turns (question, tool call, tool result, answer) until ``target_tokens`` raw tokens
    (or ``max_turns``); ``kb_only``: every turn is a ``query_kb`` call (our result shape)."""
    rng = random.Random(seed)
    counter = TokenCounter()
    turns: list[Turn] = []
    all_ids: set[str] = set()
    all_urls: set[str] = set()
    total = 0
    while total < target_tokens and (max_turns is None or len(turns) < max_turns):
        t = len(turns)
        call_id = f"call_{seed}_{t}"
        if t % 3 == 2 and not kb_only:
            name, args, text = "run_shell", {"command": f"tail -n 140 /var/log/w{t}.log"}, ""
            text = log_output(rng, t)
            cited = ""
        else:
            name, args = "query_kb", {"query": _prose(rng, 5)}
            text, ids, urls = kb_result(rng, t, dify=t % 3 == 1 and not kb_only)
            all_ids.update(ids)
            all_urls.update(urls)
            cited = f" Sources: {ids[0]}, {ids[1]}."
        msgs: Turn = (
            HumanMessage(f"Question {t}: {_prose(rng, 25)}?", id=f"h{t}"),
            AIMessage("", id=f"a{t}", tool_calls=[{"name": name, "args": args, "id": call_id}]),
            ToolMessage(text, tool_call_id=call_id, name=name, id=f"t{t}"),
            AIMessage(f"Answer {t}: {_prose(rng, 60)}.{cited}", id=f"r{t}"),
        )
        turns.append(msgs)
        total += counter.count_messages(msgs)
    return turns, all_ids, all_urls
