"""A compression pass offloads its tool results as one batch, on both Workdir backends.

One ``put_many`` for the originals and one index transaction with one multi-row INSERT; each
message still shrinks only when its own original is stored (SHA-256 as stated) and indexed:
a write that fails for real (a directory where the original's name goes; on S3 a backend
whose PUT of that key fails like a full disk) keeps that message whole with no index row,
and the rest of the batch shrinks. A failed index transaction shrinks none of the batch.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.offload import deterministic_pass
from app.compression.recall import search_workdir
from app.compression.summary_messages import is_offloaded
from app.compression.tokens import TokenCounter
from app.compression.workdir import PgIndex, S3Store, Workdir, WorkdirError, open_workdir
from app.db.session import create_engine, create_session_factory
from app.db.urls import libpq_url
from benchmarks.offload_batch import conversation, result_text
from tests.conftest import make_settings
from tests.support.processes import reaped

pytestmark = pytest.mark.integration

BATCH = 24
PREVIEW_TOKENS = 50


class RefusingS3Store(S3Store):
    """The real S3 backend, except that a PUT of a ``refused`` key fails as a full disk does
    (the other keys of the batch go to the server)."""

    refused: frozenset[str] = frozenset()

    async def put(self, key: str, data: bytes, sha256: str) -> None:
        if key in self.refused:
            cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            raise WorkdirError(f"cannot write {key}: {cause}") from cause
        await super().put(key, data, sha256)


Blocked = Callable[[str, list[str]], tuple[Workdir, str]]


@pytest.fixture
def blocked(workdir_settings: dict[str, Any], tmp_path: Path, engine: AsyncEngine) -> Blocked:
    """``(thread, call ids) -> (Workdir, the failure reason)``: the deployment's Workdir with
    the PostgreSQL index, where writing those calls' originals fails."""

    def make(thread: str, calls: list[str]) -> tuple[Workdir, str]:
        settings = make_settings("", tmp_path / "workdir", **workdir_settings).workdir
        index = PgIndex(create_session_factory(engine))
        if settings.workdir_url:
            store = RefusingS3Store(settings.workdir_url)
            workdir = Workdir(store, index)
            store.refused = frozenset(workdir.key(thread, f"tool-results/{c}.txt") for c in calls)
            return workdir, "ENOSPC (No space left on device)"
        workdir = open_workdir(settings, index)
        for call in calls:  # a directory where the original must go: rename(2) fails, EISDIR
            (settings.workdir_path / thread / "tool-results" / f"{call}.txt").mkdir(parents=True)
        return workdir, "EISDIR (Is a directory)"

    return make


@contextmanager
def database_work(engine: AsyncEngine) -> Iterator[dict[str, int]]:
    """Transactions begun and INSERTs into ``workdir_index`` while the block runs."""
    seen = {"transactions": 0, "index_inserts": 0}

    def begin(conn: Any) -> None:
        seen["transactions"] += 1

    def statement(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        if sql.lstrip().upper().startswith("INSERT INTO WORKDIR_INDEX"):
            seen["index_inserts"] += 1

    event.listen(engine.sync_engine, "begin", begin)
    event.listen(engine.sync_engine, "before_cursor_execute", statement)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "begin", begin)
        event.remove(engine.sync_engine, "before_cursor_execute", statement)


@contextmanager
def counted_fsyncs() -> Iterator[list[int]]:
    """Every ``os.fsync`` call while the block runs (each still reaches the real one)."""
    calls: list[int] = []
    real = os.fsync

    def fsync(fd: Any) -> None:
        calls.append(fd)
        real(fd)

    os.fsync = fsync
    try:
        yield calls
    finally:
        os.fsync = real


async def offload_all(
    workdir: Workdir, thread: str, messages: list[BaseMessage], **kwargs: Any
) -> tuple[list[BaseMessage], list[Any], list[str]]:
    failures: list[str] = []
    view, records = await deterministic_pass(
        messages,
        thread_id=thread,
        workdir=workdir,
        counter=TokenCounter(),
        preview_tokens=PREVIEW_TOKENS,
        failures=failures,
        **kwargs,
    )
    return view, records, failures


async def test_a_batch_is_stored_and_indexed_in_one_transaction(
    blocked: Blocked, engine: AsyncEngine, workdir_settings: dict[str, Any]
) -> None:
    workdir, _ = blocked("t", [])
    messages = conversation(BATCH)
    with database_work(engine) as work, counted_fsyncs() as fsyncs:
        view, records, failures = await offload_all(workdir, "t", messages)

    assert failures == [] and len(records) == BATCH
    assert work == {"transactions": 1, "index_inserts": 1}
    if not workdir_settings:  # local: 2 per original (object, hash sidecar) + each new folder
        assert len(fsyncs) == 2 * BATCH + 3
    for i, record in enumerate(records):
        shrunk = view[2 + 2 * i]
        assert is_offloaded(shrunk) and shrunk.id == f"m{i}"
        assert record.path in str(shrunk.content)
        # The stored bytes are the original's, and the SHA-256 the preview states is theirs.
        stored = await (await workdir.open("t", record.path)).read()
        assert stored == result_text(i).encode()
        assert record.sha256 == hashlib.sha256(stored).hexdigest()
    entries = await workdir.read_index("t")
    assert [e["path"] for e in entries] == [f"tool-results/c{i}.txt" for i in range(BATCH)]
    assert [e["sha256"] for e in entries] == [r.sha256 for r in records]
    # Recall finds each original of the batch by the word only it holds.
    for i in (0, 11, BATCH - 1):
        hits = await search_workdir(workdir, "t", f"fact{i}word")
        assert [h.path for h in hits] == [f"tool-results/c{i}.txt"]

    # A second pass in the same thread: again one transaction, and only the folder it
    # changed is fsynced once.
    more = conversation(BATCH + 4)
    more[1 : 1 + 2 * BATCH] = view[1:]
    with database_work(engine) as work, counted_fsyncs() as fsyncs:
        _, records, failures = await offload_all(workdir, "t", more)
    assert failures == [] and [r.path for r in records] == [
        f"tool-results/c{i}.txt" for i in range(BATCH, BATCH + 4)
    ]
    assert work == {"transactions": 1, "index_inserts": 1}
    if not workdir_settings:
        assert len(fsyncs) == 2 * 4 + 1
    assert await workdir.index_size("t") == BATCH + 4


async def test_a_failed_write_keeps_only_that_message_whole(
    blocked: Blocked, engine: AsyncEngine, workdir_settings: dict[str, Any], tmp_path: Path
) -> None:
    k = 6
    workdir, reason = blocked("t", [f"c{k}"])
    messages = conversation(10)
    with database_work(engine) as work:
        view, records, failures = await offload_all(workdir, "t", messages)

    assert failures == [reason]
    assert work == {"transactions": 1, "index_inserts": 1}
    assert view[2 + 2 * k] == messages[2 + 2 * k]  # whole: same content, no marker
    assert not is_offloaded(view[2 + 2 * k])
    others = [i for i in range(10) if i != k]
    assert [r.path for r in records] == [f"tool-results/c{i}.txt" for i in others]
    assert all(is_offloaded(view[2 + 2 * i]) for i in others)
    paths = [e["path"] for e in await workdir.read_index("t")]
    assert paths == [f"tool-results/c{i}.txt" for i in others]  # no row for the failed one
    assert await search_workdir(workdir, "t", f"fact{k}word") == []
    assert f"tool-results/c{k}.txt" not in await workdir.list_files("t")
    if not workdir_settings:
        # Nothing of it is left behind: no temp file, no hash sidecar; the blocker untouched.
        folder = tmp_path / "workdir" / "t" / "tool-results"
        assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == sorted(
            f".c{i}.txt.sha256" for i in others
        )
        assert list((folder / f"c{k}.txt").iterdir()) == []


async def test_a_stop_below_pass_writes_only_what_it_needs_and_moves_past_a_failure(
    blocked: Blocked,
) -> None:
    """Over the threshold by ~1.5 results: the batch is two results; the first of them fails,
    so a second batch takes the next one. Later results are neither shrunk nor written."""
    workdir, reason = blocked("t", ["c0"])
    messages = conversation(8)
    counter = TokenCounter()
    total = counter.count_messages(messages)
    probe, _, _ = await offload_all(blocked("probe", [])[0], "probe", messages[:3])
    saving = counter.count_message(messages[2]) - counter.count_message(probe[2])
    view, records, failures = await offload_all(
        workdir, "t", messages, stop_below=total - saving - saving // 2
    )
    assert failures == [reason]
    assert [r.path for r in records] == ["tool-results/c1.txt", "tool-results/c2.txt"]
    assert [is_offloaded(m) for m in view[2::2]] == [False, True, True] + [False] * 5
    assert [e["path"] for e in await workdir.read_index("t")] == [r.path for r in records]
    assert sorted(await workdir.list_files("t")) == [
        "index.jsonl",
        "tool-results/c1.txt",
        "tool-results/c2.txt",
    ]


async def test_a_failed_index_transaction_shrinks_none_of_the_batch_and_a_retry_repairs(
    blocked: Blocked, engine: AsyncEngine
) -> None:
    workdir, _ = blocked("t", [])
    dead = create_engine("postgresql://postgres@127.0.0.1:1/none")  # nothing listens there
    broken = Workdir(workdir.store, PgIndex(create_session_factory(dead)))
    messages = conversation(3)
    try:
        view, records, failures = await offload_all(broken, "t", messages)
    finally:
        await dead.dispose()
    assert view == messages and records == []
    assert failures == ["workdir index unavailable"] * 3
    assert await workdir.read_index("t") == []

    with database_work(engine) as work:
        view, records, failures = await offload_all(workdir, "t", messages)
    assert failures == [] and len(records) == 3 and all(is_offloaded(m) for m in view[2::2])
    # The files stored by the failed pass were found byte for byte: only the index was written.
    assert all(r.existed for r in records)
    assert work == {"transactions": 1, "index_inserts": 1}
    assert await workdir.index_size("t") == 3


async def test_a_call_id_used_twice_in_one_batch_keeps_both_originals(blocked: Blocked) -> None:
    workdir, _ = blocked("t", [])
    messages = conversation(2)
    first, second = messages[2], messages[4]
    assert isinstance(second, ToolMessage)
    messages[4] = second.model_copy(update={"tool_call_id": "c0"})  # a provider reused c0
    messages[3] = AIMessage("", tool_calls=[{"name": "query_kb", "args": {}, "id": "c0"}])
    view, records, failures = await offload_all(workdir, "t", messages)
    assert failures == []
    digest = hashlib.sha256(result_text(1).encode()).hexdigest()
    assert [r.path for r in records] == [
        "tool-results/c0.txt",
        f"tool-results/c0-{digest[:16]}.txt",
    ]
    for record, text, shown in zip(records, (first, second), view[2::2], strict=True):
        assert (await workdir.read_text("t", record.path))[0] == text.content
        assert record.path in str(shown.content)


# --- kill -9 between the batch's files and its index transaction -----------------------------------
REPO = Path(__file__).resolve().parents[2]
CHILD = """
import asyncio, os, sys
from app.compression.offload import deterministic_pass
from app.compression.tokens import TokenCounter
from app.compression.workdir import LocalStore, PgIndex, S3Store, Workdir
from app.db.session import create_engine, create_session_factory
from tests.integration.test_offload_batch import BATCH, PREVIEW_TOKENS, conversation

async def main() -> None:
    url = os.environ["TK_WORKDIR_URL"]
    store = S3Store(url) if url else LocalStore(os.environ["TK_WORKDIR_ROOT"])
    index = PgIndex(create_session_factory(create_engine(os.environ["TK_DATABASE_URL"])))
    await deterministic_pass(
        conversation(BATCH), thread_id="t", workdir=Workdir(store, index),
        counter=TokenCounter(), preview_tokens=PREVIEW_TOKENS,
    )
    sys.exit("the index transaction was not held back")

asyncio.run(main())
"""


async def test_killed_between_files_and_index_a_retry_indexes_the_stored_originals(
    blocked: Blocked,
    engine: AsyncEngine,
    clean_db: str,
    workdir_settings: dict[str, Any],
    tmp_path: Path,
) -> None:
    """A worker process stores the batch's originals, then waits on its index INSERT (the
    table is locked here) and is killed with SIGKILL: no row, no message shrunk (its view was
    never returned). The next pass finds every original stored byte for byte and only indexes
    them, in one transaction."""
    workdir, _ = blocked("t", [])
    env = {
        **os.environ,
        "TK_WORKDIR_URL": workdir_settings.get("workdir_url", ""),
        "TK_WORKDIR_ROOT": str(tmp_path / "workdir"),
        "TK_DATABASE_URL": clean_db,
    }
    with (
        psycopg.connect(libpq_url(clean_db), autocommit=True) as locker,
        psycopg.connect(libpq_url(clean_db), autocommit=True) as watcher,
    ):
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE workdir_index IN SHARE ROW EXCLUSIVE MODE")
        command = [sys.executable, "-c", CHILD]
        proc = await asyncio.to_thread(subprocess.Popen, command, cwd=REPO, env=env)
        with reaped(proc):
            waiting = 0
            for _ in range(600):  # the child's INSERT is waiting for the lock
                waiting = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO workdir_index%'"
                ).fetchone()[0]
                if waiting or proc.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            assert waiting == 1 and proc.poll() is None
            proc.send_signal(signal.SIGKILL)
            assert await asyncio.to_thread(proc.wait, 30) == -signal.SIGKILL
        locker.execute("ROLLBACK")

    assert await workdir.index_size("t") == 0
    for i in range(BATCH):  # every original was durably stored before the INSERT was sent
        stream = await workdir.open("t", f"tool-results/c{i}.txt")
        assert await stream.read() == result_text(i).encode()
        assert stream.sha256 == hashlib.sha256(result_text(i).encode()).hexdigest()

    with database_work(engine) as work:
        view, records, failures = await offload_all(workdir, "t", conversation(BATCH))
    assert failures == [] and len(records) == BATCH and all(r.existed for r in records)
    assert all(is_offloaded(m) for m in view[2::2])
    assert work == {"transactions": 1, "index_inserts": 1}
    hits = await search_workdir(workdir, "t", "fact7word")
    assert [h.path for h in hits] == ["tool-results/c7.txt"]
