"""One compression pass offloading many tool results: one at a time vs batched, side by side.

Run: ``.venv/bin/python benchmarks/offload_batch.py`` (under a minute; ``--results 24``
``--rounds 9`` ``--backends local,s3``). Uses a fresh, migrated database on ``DATABASE_URL`` /
``TEST_DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``), dropped at
the end, a temp folder (the local backend) and, for ``s3``, moto's S3 server on loopback.

"Before" is the pass as it was, kept here: each candidate's original written by its own
``Workdir.write_tool_result`` (its own temp file + fsync + rename + folder fsync, for the
object and its hash sidecar) and indexed in its own transaction. "After" is the app's
``deterministic_pass``: one ``put_many`` (local: every file fsynced, each changed folder
fsynced once; S3: concurrent PUTs) and one index transaction with one multi-row INSERT. Each
round offloads ``--results`` results of a fresh thread on each side, the sides alternating
which goes first; the figures are medians over the rounds. fsyncs are counted by wrapping
``os.fsync`` (each call still reaches the real one), transactions and index INSERTs with
SQLAlchemy events. Process CPU is every thread of this process (for ``s3`` that includes the
moto server). Absolute times need a quiet machine; the counts do not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.offload import (
    DEFAULT_PROTECTED_TOOLS,
    PREVIEW_CHARS_PER_TOKEN,
    _calls_by_id,
    _candidate,
    _previewed,
    deterministic_pass,
)
from app.compression.recall import index_fields
from app.compression.summary_messages import is_offloaded
from app.compression.tokens import TokenCounter
from app.compression.workdir import LocalStore, PgIndex, S3Store, Workdir, WorkdirError
from app.db.session import create_engine, create_session_factory
from benchmarks.common import fresh_database, server_from_env

PREVIEW_TOKENS = 50


def result_text(i: int) -> str:
    """A knowledge-base-shaped result of ~2.5 KB."""
    content = f"Leases renew on heartbeat; fact{i}word closes result {i}. " * 40
    return json.dumps({"query": f"q{i}", "results": [{"id": f"r-{i}", "content": content}]})


def conversation(n: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [HumanMessage("how do leases renew?")]
    for i in range(n):
        call = {"name": "query_kb", "args": {"query": f"q{i}"}, "id": f"c{i}"}
        out.append(AIMessage("", tool_calls=[call], id=f"a{i}"))
        out.append(ToolMessage(result_text(i), tool_call_id=f"c{i}", name="query_kb", id=f"m{i}"))
    return out


async def one_at_a_time(
    messages: list[BaseMessage], *, thread_id: str, workdir: Workdir, counter: TokenCounter
) -> list[BaseMessage]:
    """The pass before batching (kept here): a Workdir call per original, file and index."""
    view = list(messages)
    calls = _calls_by_id(messages)
    budget_chars = max(PREVIEW_TOKENS * PREVIEW_CHARS_PER_TOKEN, 600)
    for index, message in enumerate(messages):
        candidate = _candidate(message, calls, counter, PREVIEW_TOKENS, DEFAULT_PROTECTED_TOOLS)
        if candidate is None:
            continue
        message, tool_name, args, text, original_tokens = candidate
        try:
            record = await workdir.write_tool_result(
                thread_id, message.tool_call_id, text, index=index_fields(tool_name, args, text)
            )
        except WorkdirError:
            continue
        replacement = _previewed(
            message,
            tool_name,
            text,
            record,
            budget_chars=budget_chars,
            original_tokens=original_tokens,
        )
        if counter.count_message(replacement) < original_tokens:
            view[index] = replacement
    return view


async def batched(
    messages: list[BaseMessage], *, thread_id: str, workdir: Workdir, counter: TokenCounter
) -> list[BaseMessage]:
    view, _ = await deterministic_pass(
        messages,
        thread_id=thread_id,
        workdir=workdir,
        counter=counter,
        preview_tokens=PREVIEW_TOKENS,
    )
    return view


@dataclass
class Side:
    name: str
    run: Callable[..., Any]
    ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    fsyncs: list[int] = field(default_factory=list)
    transactions: list[int] = field(default_factory=list)
    inserts: list[int] = field(default_factory=list)


@contextmanager
def counting(engine: AsyncEngine) -> Iterator[dict[str, int]]:
    """os.fsync calls, transactions begun and INSERTs into workdir_index inside the block."""
    seen = {"fsyncs": 0, "transactions": 0, "inserts": 0}
    real = os.fsync

    def fsync(fd: Any) -> None:
        seen["fsyncs"] += 1
        real(fd)

    def begin(conn: Any) -> None:
        seen["transactions"] += 1

    def statement(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        if sql.lstrip().upper().startswith("INSERT INTO WORKDIR_INDEX"):
            seen["inserts"] += 1

    os.fsync = fsync
    event.listen(engine.sync_engine, "begin", begin)
    event.listen(engine.sync_engine, "before_cursor_execute", statement)
    try:
        yield seen
    finally:
        os.fsync = real
        event.remove(engine.sync_engine, "begin", begin)
        event.remove(engine.sync_engine, "before_cursor_execute", statement)


async def measure(
    backend: str, workdir: Workdir, engine: AsyncEngine, args: argparse.Namespace
) -> list[Side]:
    sides = [Side("one at a time", one_at_a_time), Side("batched", batched)]
    messages = conversation(args.results)
    counter = TokenCounter()
    for side in sides:  # warm-up: imports, connections, folders' first use
        await side.run(messages, thread_id=f"warm-{side.name}", workdir=workdir, counter=counter)
    for round_ in range(args.rounds):
        order = sides if round_ % 2 == 0 else sides[::-1]
        for side in order:
            thread = f"{backend}-{side.name.replace(' ', '-')}-{round_}"
            with counting(engine) as seen:
                started, cpu = time.perf_counter(), time.process_time()
                view = await side.run(messages, thread_id=thread, workdir=workdir, counter=counter)
                elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
            shrunk = sum(1 for m in view if is_offloaded(m))
            if shrunk != args.results:
                raise SystemExit(f"{side.name}: {shrunk} of {args.results} offloaded")
            side.ms.append(elapsed * 1000)
            side.cpu_ms.append(cpu * 1000)
            side.fsyncs.append(seen["fsyncs"])
            side.transactions.append(seen["transactions"])
            side.inserts.append(seen["inserts"])
    return sides


def report(backend: str, sides: list[Side], args: argparse.Namespace) -> None:
    old, new = sides
    print(f"\n{backend}: {args.results} offloads per pass, medians of {args.rounds} rounds")
    print(f"{'':28}{old.name:>16}{new.name:>12}{'ratio':>9}")
    for label, attr, fmt in (
        ("pass (ms)", "ms", "{:.1f}"),
        ("process CPU (ms)", "cpu_ms", "{:.1f}"),
        ("os.fsync calls", "fsyncs", "{:.0f}"),
        ("index transactions", "transactions", "{:.0f}"),
        ("index INSERT statements", "inserts", "{:.0f}"),
    ):
        a = statistics.median(getattr(old, attr))
        b = statistics.median(getattr(new, attr))
        ratio = f"{a / b:.1f}x" if b else "-"
        print(f"{label:28}{fmt.format(a):>16}{fmt.format(b):>12}{ratio:>9}")


@contextmanager
def s3_workdir(index: PgIndex) -> Iterator[Workdir]:
    """moto's S3 server on loopback, a bucket, and a Workdir on it."""
    from tests.support.s3_server import run_s3_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one access-log line per PUT
    server_iter = run_s3_server()
    server = next(server_iter)
    saved = dict(os.environ)
    os.environ.update(server.aws_env())
    try:
        bucket = server.new_bucket()
        yield Workdir(S3Store(f"s3://{bucket}/bench"), index)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server_iter.close()


async def run(args: argparse.Namespace, url: str) -> None:
    engine = create_engine(url)
    index = PgIndex(create_session_factory(engine))
    try:
        for backend in args.backends.split(","):
            if backend == "local":
                with tempfile.TemporaryDirectory(prefix="tk-offload-") as root:
                    workdir = Workdir(LocalStore(root), index)
                    report(backend, await measure(backend, workdir, engine, args), args)
            elif backend == "s3":
                with s3_workdir(index) as workdir:
                    report(backend, await measure(backend, workdir, engine, args), args)
            else:
                raise SystemExit(f"unknown backend {backend!r} (local, s3)")
    finally:
        await engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, default=24, help="offloads per pass")
    parser.add_argument("--rounds", type=int, default=9, help="passes per side (medians)")
    parser.add_argument("--backends", default="local,s3", help="local, s3 or both")
    args = parser.parse_args(argv)
    with fresh_database(server_from_env(), "tk_offload") as url:
        asyncio.run(run(args, url))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
