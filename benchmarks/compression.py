"""Compression benchmark: Threadkeeper's ContextCompressor vs langchain's SummarizationMiddleware.

Run: ``.venv/bin/python benchmarks/compression.py`` (about a minute on 2 cores, no network);
``--kb-session`` runs only the 60-turn ``query_kb`` session (a few seconds).

Each scenario replays a generated, tool-heavy agent thread (retrieval-style ``query_kb`` JSON,
Dify-style chunk lists and generic log text) of 10k-200k raw tokens through an agent loop:
before every model call the method under test may compress the state, and its result is what
the graph would persist. Both methods use the same trigger (request tokens >= threshold, exact
BPE counts), the same "keep recent" budget and the SAME counted, deterministic summarizing chat
model, so summarizer calls are comparable. Reported per scenario and method:

- ``calls``: summarizer (chat model) calls over the whole thread;
- ``peak``/``final``: largest and last request size sent to the model (tokens);
- ``ids``/``urls``: share of all retrieval result ids / URLs still visible to the model at the
  end; ``ids+wd``: ids visible or inside a Workdir file whose path the final view still names
  (readable with ``read_workdir_file``);
- ``noop p50/p99``: cost of the per-call check on the full raw thread when below threshold
  (cache warm), and ``pass p50/p99``: cost of the deterministic offload pass (Threadkeeper).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately

from app.compression.offload import deterministic_pass
from app.compression.recall import search_workdir
from app.compression.summary import ContextCompressor
from app.compression.tokens import TokenCounter
from app.compression.workdir import INDEX_PATH, Workdir
from benchmarks.compression_methods import (
    CACHED_PRICE,
    KEEP_RECENT,
    PREVIEW_TOKENS,
    SUMMARY_MAX,
    SYSTEM,
    THRESHOLD,
    TOOLS,
    ChatModelSummarizer,
    ExtractiveSummaryModel,
    cache_figures,
    langchain_method,
    replay,
    threadkeeper_method,
)
from benchmarks.compression_threads import generate_thread

SIZES = (10_000, 50_000, 100_000, 200_000)
#: The issue's cache scenario: a 60-turn session of query_kb calls only (120 model requests).
KB_SESSION_TURNS = 60


def readable_share(view: Sequence[BaseMessage], needles: set[str], thread_dir: Path) -> float:
    """Share of ``needles`` visible, or inside a Workdir file the view still names."""
    text = "\n".join(m.text for m in view)
    files = sorted(thread_dir.glob("tool-results/*.txt")) if thread_dir.is_dir() else []
    named = [f.read_text(encoding="utf-8") for f in files if f"tool-results/{f.name}" in text]
    haystack = "\n".join([text, *named])
    return sum(1 for n in needles if n in haystack) / len(needles) if needles else 1.0


async def recall_share(
    view: Sequence[BaseMessage], needles: set[str], workdir: Workdir | None, thread_id: str
) -> float:
    """Share of ``needles`` visible, in a Workdir file the view names, in a file listed by an
    index the view names, or found by ``search_workdir`` (the model's three ways back)."""
    if not needles:
        return 1.0
    text = "\n".join(m.text for m in view)
    found = {n for n in needles if n in text}
    if workdir is not None and found != needles:
        entries = await workdir.read_index(thread_id)
        listed = INDEX_PATH in text
        for path in dict.fromkeys(str(e["path"]) for e in entries):
            if listed or path in text:
                body, _, _ = await workdir.read_text(thread_id, path)
                found |= {n for n in needles - found if n in body}
        for needle in needles - found:
            if any(needle in h.snippet for h in await search_workdir(workdir, thread_id, needle)):
                found.add(needle)
    return len(found) / len(needles)


def visible_share(view: Sequence[BaseMessage], needles: set[str]) -> float:
    if not needles:
        return 1.0
    text = "\n".join(m.text for m in view)
    return sum(1 for n in needles if n in text) / len(needles)


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(median, p99) in ms."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def timings(fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return percentiles(samples)


async def scenario(
    size: int, seed: int, root: Path, *, max_turns: int | None = None, kb_only: bool = False
) -> list[dict[str, Any]]:
    turns, ids, urls = generate_thread(size, seed, max_turns=max_turns, kb_only=kb_only)
    raw = [m for t in turns for m in t]
    rows: list[dict[str, Any]] = []
    name = f"{'kb' if kb_only else 'mix'}-{size}"
    for label in ("threadkeeper", "langchain"):
        counter = TokenCounter()
        model = ExtractiveSummaryModel()
        folder = root / f"{label}-{name}"
        folder.mkdir()
        workdir: Workdir | None = None
        if label == "threadkeeper":
            compress, _ = threadkeeper_method(folder, model, counter)
            workdir = Workdir(folder)
        else:
            compress, _ = langchain_method(model, counter)
        started = time.perf_counter()
        requests = await replay(turns, compress, counter)
        elapsed = time.perf_counter() - started
        view = requests[-1]
        sent = [counter.count_request(SYSTEM, TOOLS, r) for r in requests]
        rows.append(
            {
                "size": size,
                "scenario": f"{len(turns)} turns{' query_kb' if kb_only else ''}",
                "raw": counter.count_request(SYSTEM, TOOLS, raw),
                "method": label,
                "calls": model.calls,
                "peak": max(sent),
                "final": sent[-1],
                "ids": visible_share(view, ids),
                "urls": visible_share(view, urls),
                "readable": readable_share(view, ids, folder / "bench"),
                "recall": await recall_share(view, ids, workdir, "bench"),
                "replay_s": elapsed,
                **cache_figures(requests, counter),
            }
        )
    return rows


async def timed_scenario(size: int, seed: int, root: Path) -> list[dict[str, Any]]:
    rows = await scenario(size, seed, root)
    turns, _, _ = generate_thread(size, seed)
    raw = [m for t in turns for m in t]
    timing_root = root / f"timing-{size}"
    timing_root.mkdir()
    rows[0].update(await noop_and_pass(raw, timing_root))
    rows[1].update(noop_langchain(raw))
    return rows


async def noop_and_pass(raw: list[BaseMessage], root: Path) -> dict[str, Any]:
    """Per-call check below threshold (cache warm) and the deterministic pass on the raw thread."""
    counter = TokenCounter()
    compressor = ContextCompressor(
        summarizer=ChatModelSummarizer(ExtractiveSummaryModel()),
        workdir=Workdir(root),
        counter=counter,
        summary_threshold=10**9,
    )

    async def check() -> None:
        await compressor.compress(raw, thread_id="x", system_message=SYSTEM, tools=TOOLS)

    await check()  # warm the cache (the first count encodes everything)
    samples = []
    for _ in range(200):
        start = time.perf_counter()
        await check()
        samples.append((time.perf_counter() - start) * 1000)
    workdir = Workdir(root)
    passes = []
    for run in range(7):
        start = time.perf_counter()
        await deterministic_pass(
            raw,
            thread_id=f"p{run}",
            workdir=workdir,
            counter=counter,
            preview_tokens=PREVIEW_TOKENS,
        )
        passes.append((time.perf_counter() - start) * 1000)
    return {"noop": percentiles(samples), "pass": percentiles(passes)}


def noop_langchain(raw: list[BaseMessage]) -> dict[str, Any]:
    """langchain's before_model below its trigger: with our cached counter and its default."""
    counter = TokenCounter()
    model = ExtractiveSummaryModel()
    exact = SummarizationMiddleware(
        model=model, trigger=("tokens", 10**9), token_counter=counter.count_messages
    )
    approx = SummarizationMiddleware(
        model=model, trigger=("tokens", 10**9), token_counter=count_tokens_approximately
    )
    state: Any = {"messages": list(raw)}
    exact.before_model(state, None)  # type: ignore[arg-type]
    return {
        "noop": timings(lambda: exact.before_model(state, None), 200),  # type: ignore[arg-type]
        "noop_approx": timings(lambda: approx.before_model(state, None), 50),  # type: ignore[arg-type]
    }


def fmt_ms(pair: tuple[float, float] | None) -> str:
    return "-" if pair is None else f"{pair[0]:.2f}/{pair[1]:.2f}"


async def main(kb_session_only: bool) -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tk-bench-") as tmp:
        rows: list[dict[str, Any]] = []
        for seed, size in enumerate(() if kb_session_only else SIZES, start=1):
            rows += await timed_scenario(size, seed, Path(tmp))
        kb_rows = await scenario(10**9, 99, Path(tmp), max_turns=KB_SESSION_TURNS, kb_only=True)
    print(
        f"threshold={THRESHOLD} preview={PREVIEW_TOKENS} keep_recent={KEEP_RECENT} "
        f"summary_max={SUMMARY_MAX} (tokens, exact cl100k BPE; request = system+tools+messages)"
    )
    header = (
        f"{'raw tokens':>10} {'method':<13} {'calls':>5} {'peak':>7} {'final':>7} "
        f"{'ids':>6} {'urls':>6} {'ids+wd':>6} {'noop p50/p99 ms':>16} {'pass p50/p99 ms':>16} "
        f"{'replay s':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['raw']:>10} {row['method']:<13} {row['calls']:>5} {row['peak']:>7} "
            f"{row['final']:>7} {row['ids']:>6.0%} {row['urls']:>6.0%} {row['readable']:>6.0%} "
            f"{fmt_ms(row.get('noop')):>16} {fmt_ms(row.get('pass')):>16} "
            f"{row['replay_s']:>8.2f}"
        )
    print()
    print(
        "Prompt cache and recall: rewrites = requests whose previous request is not an unchanged"
        " prefix (per 100 requests); reuse = share of request tokens that are that prefix;"
        f" cost = input tokens with cached ones billed at {CACHED_PRICE:.0%} (k tokens, and vs"
        " no cache); recall = share of all result ids visible, in a file or index the final view"
        " names, or found by search_workdir."
    )
    header = (
        f"{'scenario':>20} {'raw tokens':>10} {'method':<13} {'requests':>8} {'rewrites':>8} "
        f"{'reuse':>6} {'cost k':>8} {'vs none':>7} {'summarizer':>10} {'recall':>6}"
    )
    print(header)
    print("-" * len(header))
    for row in [*rows, *kb_rows]:
        print(
            f"{row['scenario']:>20} {row['raw']:>10} {row['method']:<13} {row['requests']:>8} "
            f"{row['rewrites_per_100']:>8.1f} {row['prefix_reuse']:>6.1%} "
            f"{row['cost'] / 1000:>8.1f} {row['cost'] / row['cost_nocache']:>7.1%} "
            f"{row['calls']:>10} {row['recall']:>6.1%}"
        )
    print()
    print("langchain no-op with its default count_tokens_approximately (p50/p99 ms):")
    for row in rows:
        if row["method"] == "langchain":
            print(f"  raw {row['raw']:>7}: {fmt_ms(row.get('noop_approx'))}")
    print(f"\ntotal benchmark time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kb-session", action="store_true", help="only the 60-turn query_kb session"
    )
    asyncio.run(main(parser.parse_args().kb_session))
