"""Recall cost by thread length: an offload (original + index entry) and a ``search_workdir``
call at 10, 100 and 1000 offloaded results, before and after the index moved to PostgreSQL.

Run: ``.venv/bin/python benchmarks/recall.py`` (about a minute; ``--sizes 10,100`` for a smoke
run). Uses a fresh, migrated database on ``DATABASE_URL`` / ``TEST_DATABASE_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), dropped at the end, and a temp folder
(the local Workdir backend).

"Before" is the old algorithm, kept here: each offload rewrote the thread's whole
``index.jsonl`` (read it, append a line, store it again), and each search read, SHA-256-verified
and scanned every original the index listed. "After" is the app's: one INSERT per original into
``workdir_index`` and a search that asks the index which originals hold the query's terms and
reads only those. One thread grows to the largest size on each side; at each size the offload
figure is the median of the last ``--window`` offloads before it, the search figure the median of
``--searches`` queries (each for a word one original holds, as a recall query for a fact does).
Absolute times need a quiet machine (each offload commits: a WAL or file fsync); the index
bytes and files read per call do not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import text as sql

from app.compression.recall import _best_passage, index_fields, search_workdir
from app.compression.terms import terms
from app.compression.workdir import (
    LocalStore,
    PgIndex,
    StoredObject,
    Workdir,
    WorkdirError,
    WorkdirNotFoundError,
)
from app.db.session import create_engine, create_session_factory
from benchmarks.common import fresh_database, server_from_env

BEFORE_INDEX = "index-before.jsonl"  # the old index.jsonl, under a name the new facade leaves be
WORDS = [
    "lease",
    "heartbeat",
    "renew",
    "grace",
    "expiry",
    "shard",
    "replica",
    "quorum",
    "ledger",
    "vault",
    "audit",
    "export",
]


class CountingStore(LocalStore):
    """The local backend, with the objects read and the bytes stored counted."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.opened: Counter[str] = Counter()
        self.put_bytes = 0

    async def put(self, key: str, data: bytes, sha256: str) -> None:
        self.put_bytes += len(data)
        await super().put(key, data, sha256)

    async def open(self, key: str) -> tuple[StoredObject, AsyncIterator[bytes]]:
        self.opened[key] += 1
        return await super().open(key)


def result_text(i: int) -> str:
    """A ~4 KB knowledge-base-shaped result; result i alone holds the word ``needle<i>``."""
    results = [
        {
            "id": f"r{i}-{k}",
            "source": f"kb/{i}/{k}.md",
            "title": f"Result {i}.{k}",
            "url": f"https://kb.example/{i}/{k}",
            "content": " ".join(WORDS[(i + k + j) % len(WORDS)] for j in range(90))
            + (f" needle{i} marks this one." if k == 3 else ""),
        }
        for k in range(6)
    ]
    return json.dumps({"query": f"q{i}", "count": 6, "results": results})


# --- before: the old algorithm ----------------------------------------------------------------
async def append_before(workdir: Workdir, thread: str, entry: dict[str, Any]) -> None:
    line = json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n"
    try:
        current, _, _ = await workdir.read_text(thread, BEFORE_INDEX)
    except WorkdirNotFoundError:
        current = ""
    await workdir.write_text(thread, BEFORE_INDEX, current + line)


async def offload_before(workdir: Workdir, thread: str, i: int) -> None:
    text = result_text(i)
    record = await workdir.write_tool_result(thread, f"c{i}", text)  # no index: the file only
    entry = {"path": record.path, "sha256": record.sha256, "chars": record.chars}
    await append_before(workdir, thread, {**entry, **index_fields("query_kb", {}, text)})


async def search_before(workdir: Workdir, thread: str, query: str) -> int:
    """The old search: every original the index lists is read, verified and scanned."""
    needle = " ".join(query.split())
    words = sorted(terms(needle), key=len, reverse=True)
    index, _, _ = await workdir.read_text(thread, BEFORE_INDEX)
    found = 0
    for line in index.splitlines():
        try:
            text, _, _ = await workdir.read_text(thread, json.loads(line)["path"])
        except WorkdirError:
            continue
        found += _best_passage(text, needle, words, 320) is not None
    return found


# --- after: the app's --------------------------------------------------------------------------
async def offload_after(workdir: Workdir, thread: str, i: int) -> None:
    text = result_text(i)
    fields = index_fields("query_kb", {}, text)
    await workdir.write_tool_result(thread, f"c{i}", text, index=fields)


async def search_after(workdir: Workdir, thread: str, query: str) -> int:
    return len(await search_workdir(workdir, thread, query))


@dataclass
class Side:
    offload_ms: dict[int, float] = field(default_factory=dict)
    written: dict[int, float] = field(default_factory=dict)
    search_ms: dict[int, float] = field(default_factory=dict)
    reads: dict[int, float] = field(default_factory=dict)
    total_index_bytes: int = 0


async def measure(
    name: str, workdir: Workdir, store: CountingStore, sizes: list[int], args: argparse.Namespace
) -> Side:
    side = Side()
    offload = offload_before if name == "before" else offload_after
    search = search_before if name == "before" else search_after
    times: list[float] = []
    written: list[int] = []
    for i in range(max(sizes)):
        before_bytes = store.put_bytes
        start = time.perf_counter()
        await offload(workdir, "t", i)
        times.append((time.perf_counter() - start) * 1000)
        written.append(store.put_bytes - before_bytes - len(result_text(i).encode()))
        n = i + 1
        if n in sizes:
            side.offload_ms[n] = statistics.median(times[-args.window :])
            side.written[n] = statistics.median(written[-args.window :])
            durations, reads = [], []
            for q in range(args.searches):
                target = (q * 7919) % n
                store.opened.clear()
                start = time.perf_counter()
                hits = await search(workdir, "t", f"needle{target}")
                durations.append((time.perf_counter() - start) * 1000)
                reads.append(sum(store.opened.values()))
                assert hits >= 1, (name, n, target)
            side.search_ms[n] = statistics.median(durations)
            side.reads[n] = statistics.median(reads)
    side.total_index_bytes = sum(written)
    return side


async def row_bytes(url: str) -> float:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            value = await conn.scalar(sql("SELECT avg(pg_column_size(w.*)) FROM workdir_index w"))
            return float(value or 0)
    finally:
        await engine.dispose()


def ratio(before: float, after: float) -> str:
    return f"{before / after:8.1f}x" if after else "      -"


def report(sizes: list[int], before: Side, after: Side, row: float) -> None:
    print("\nRecall cost by thread length (local Workdir, PostgreSQL index; medians)\n")
    print(
        f"{'results':>8} | {'offload ms':>21} {'ratio':>9} | {'index bytes/offload':>23} |"
        f" {'search ms':>21} {'ratio':>9} | {'files read/search':>19}"
    )
    print(
        f"{'':>8} | {'before':>10} {'after':>10} {'':>9} | {'before':>11} {'after':>11} |"
        f" {'before':>10} {'after':>10} {'':>9} | {'before':>9} {'after':>9}"
    )
    for n in sizes:
        print(
            f"{n:>8} | {before.offload_ms[n]:>10.2f} {after.offload_ms[n]:>10.2f}"
            f" {ratio(before.offload_ms[n], after.offload_ms[n])} |"
            f" {before.written[n]:>11.0f} {row:>11.0f} |"
            f" {before.search_ms[n]:>10.2f} {after.search_ms[n]:>10.2f}"
            f" {ratio(before.search_ms[n], after.search_ms[n])} |"
            f" {before.reads[n]:>9.0f} {after.reads[n]:>9.0f}"
        )
    top = max(sizes)
    print(
        f"\nIndex bytes written to reach {top} results: before {before.total_index_bytes:,}"
        f" (whole index.jsonl rewritten per offload), after {row * top:,.0f}"
        " (one row per offload: avg pg_column_size of a workdir_index row, tsvector included)."
    )
    print(
        "Each query names a word one original holds. after's files read = the originals the "
        "index names (at most 3 per hit asked for); before's = the index + every original."
    )


async def run(args: argparse.Namespace, url: str) -> None:
    sizes = sorted(int(s) for s in args.sizes.split(","))
    with tempfile.TemporaryDirectory(prefix="tk-recall-") as tmp:
        roots = {name: Path(tmp) / name for name in ("before", "after")}
        for root in roots.values():
            root.mkdir()
        engine = create_engine(url)
        try:
            index = PgIndex(create_session_factory(engine))
            stores = {name: CountingStore(root) for name, root in roots.items()}
            before = await measure(
                "before", Workdir(stores["before"]), stores["before"], sizes, args
            )
            after = await measure(
                "after", Workdir(stores["after"], index), stores["after"], sizes, args
            )
        finally:
            await engine.dispose()
        report(sizes, before, after, await row_bytes(url))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000", help="thread lengths to report")
    parser.add_argument("--window", type=int, default=9, help="offloads per median")
    parser.add_argument("--searches", type=int, default=5, help="queries per median")
    args = parser.parse_args(argv)
    with fresh_database(server_from_env(), prefix="tk_recall") as url:  # migrates: no loop yet
        asyncio.run(run(args, url))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
