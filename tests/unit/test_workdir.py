"""Workdir: atomic, verifiable offload files confined to the thread folder, on both backends.

Every behaviour that is not specific to a file system runs on the local folder AND on S3 (a real
S3 HTTP server on loopback, see ``tests/support/s3_server.py``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from app.compression.workdir import (
    CHUNK_BYTES,
    S3Store,
    Workdir,
    WorkdirError,
    WorkdirIntegrityError,
    WorkdirNotFoundError,
    WorkdirPathError,
    open_workdir,
    safe_name,
)
from tests.conftest import make_settings
from tests.support.s3_server import S3Server
from tests.support.workdir_tamper import bucket_of, tamper

TEXT = "Zürich 東京 results\n" * 500


@pytest.fixture
def workdir(workdir_settings: dict[str, Any], tmp_path: Path) -> Workdir:
    return open_workdir(make_settings("", tmp_path / "workdir", **workdir_settings).workdir)


async def test_write_then_read_round_trip(workdir: Workdir) -> None:
    record = await workdir.write_tool_result("thread-1", "call_abc", TEXT)
    data = TEXT.encode("utf-8")
    assert record.path == "tool-results/call_abc.txt"
    assert record.key == "thread-1/tool-results/call_abc.txt"
    assert record.sha256 == hashlib.sha256(data).hexdigest()
    assert record.chars == len(TEXT)
    assert record.bytes == len(data)
    text, total, sha = await workdir.read_text("thread-1", record.path, offset=10, limit=25)
    assert text == TEXT[10:35]
    assert total == len(TEXT)
    assert sha == record.sha256
    full, _, _ = await workdir.read_text("thread-1", record.path)
    assert full == TEXT
    # No temp files or hash sidecars are visible as files of the thread.
    assert await workdir.list_files("thread-1") == ["tool-results/call_abc.txt"]


async def test_stream_reports_stored_hash_first_then_verified_chunks(workdir: Workdir) -> None:
    big = "0123456789abcdef" * (CHUNK_BYTES // 4)  # four chunks' worth
    record = await workdir.write_tool_result("t", "big", big)
    stream = await workdir.open("t", record.path)
    assert (stream.sha256, stream.size) == (record.sha256, len(big))
    chunks = [chunk async for chunk in stream]
    assert len(chunks) > 1
    assert b"".join(chunks) == big.encode()


async def test_reused_tool_call_id_never_replaces_an_original(workdir: Workdir) -> None:
    """Some providers reuse ids like call_0: the first file must keep matching its preview."""
    first = await workdir.write_tool_result("t", "c1", "first")
    second = await workdir.write_tool_result("t", "c1", "second version")
    assert first.path == "tool-results/c1.txt" and second.path != first.path
    assert await workdir.read_text("t", first.path) == ("first", 5, first.sha256)
    assert (await workdir.read_text("t", second.path))[0] == "second version"
    assert (await workdir.read_text("t", second.path))[2] == second.sha256
    # Writing the same content again is idempotent: same record, no new file.
    again = await workdir.write_tool_result("t", "c1", "second version")
    assert again.path == second.path and again.sha256 == second.sha256
    assert len(await workdir.list_files("t")) == 2


async def test_corrupted_object_is_refused_not_served(
    workdir: Workdir, workdir_settings: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    """The SHA-256 is stored with the object and checked on read: altered bytes are an error."""
    record = await workdir.write_tool_result("t", "c", "the original text")
    s3 = request.getfixturevalue("s3_server") if workdir_settings else None
    tamper(workdir, record, s3, bucket_of(workdir_settings))
    with pytest.raises(WorkdirIntegrityError):
        await workdir.read_text("t", record.path)


async def test_s3_object_carries_its_sha256(aws_s3: S3Server, tmp_path: Path) -> None:
    s3_server = aws_s3
    bucket = s3_server.new_bucket()
    workdir = open_workdir(make_settings("", tmp_path, **s3_server.settings(bucket, "p/q")).workdir)
    assert isinstance(workdir.store, S3Store)
    record = await workdir.write_tool_result("thread", "call", TEXT)
    head = s3_server.client().head_object(Bucket=bucket, Key=f"p/q/{record.key}")
    assert head["Metadata"]["sha256"] == record.sha256
    assert head["ContentLength"] == record.bytes


async def test_overlong_paths_are_refused(workdir: Workdir) -> None:
    await workdir.write_tool_result("t", "c", "text")
    for bad in ("a" * 5000, "tool-results/" + "b" * 300):
        with pytest.raises(WorkdirPathError):
            await workdir.read_text("t", bad)


@pytest.mark.parametrize("raw", ["../../etc/passwd", "call/with/slash", "..", ".hidden", "é"])
async def test_unsafe_tool_call_ids_are_hashed(workdir: Workdir, raw: str) -> None:
    record = await workdir.write_tool_result("t", raw, "x")
    assert record.path == f"tool-results/{safe_name(raw)}.txt"
    assert safe_name(raw).startswith("h-")
    assert await workdir.list_files("t") == [record.path]


async def test_missing_root_or_bucket_is_an_error_and_not_created(
    workdir_settings: dict[str, Any], tmp_path: Path
) -> None:
    if workdir_settings:
        missing = {**workdir_settings, "workdir_url": "s3://no-such-bucket-here/p"}
        workdir = open_workdir(make_settings("", tmp_path, **missing).workdir)
    else:
        workdir = Workdir(tmp_path / "missing")
    with pytest.raises(WorkdirError):
        await workdir.check()
    with pytest.raises(WorkdirError):
        await workdir.write_tool_result("t", "c", "text")
    assert not (tmp_path / "missing").exists()


async def test_delete_thread_removes_only_that_thread(workdir: Workdir) -> None:
    await workdir.write_tool_result("a", "c1", "one")
    await workdir.write_tool_result("a", "c2", "two")
    kept = await workdir.write_tool_result("b", "c1", "other thread")
    await workdir.delete_thread("a")
    assert await workdir.list_files("a") == []
    with pytest.raises(WorkdirNotFoundError):
        await workdir.read_text("a", "tool-results/c1.txt")
    assert (await workdir.read_text("b", kept.path))[0] == "other thread"


@pytest.mark.parametrize(
    "bad",
    [
        "/etc/passwd",
        "../other/tool-results/c.txt",
        "tool-results/../../x",
        "",
        "C:\\x",
        "tool-results/.c.txt.sha256",
    ],
)
async def test_paths_leaving_the_thread_folder_are_refused(workdir: Workdir, bad: str) -> None:
    await workdir.write_tool_result("t", "c", "text")
    with pytest.raises(WorkdirPathError):
        await workdir.read_text("t", bad)
    assert issubclass(WorkdirPathError, ValueError)


async def test_missing_file(workdir: Workdir) -> None:
    with pytest.raises(WorkdirNotFoundError) as info:
        await workdir.read_text("t", "tool-results/none.txt")
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, WorkdirError)
    record = await workdir.write_tool_result("t", "c", "x")
    with pytest.raises(WorkdirPathError):
        await workdir.read_text("t", record.path, offset=-1)


# --- local folder only: file-system specifics ----------------------------------------------------
async def test_root_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "file"
    root.write_text("not a directory")
    with pytest.raises(WorkdirError):
        await Workdir(root).write_tool_result("t", "c", "text")


async def test_target_that_is_a_directory_fails_cleanly(tmp_path: Path) -> None:
    target = tmp_path / "t" / "tool-results" / "c.txt"
    target.mkdir(parents=True)
    with pytest.raises(WorkdirError):
        await Workdir(tmp_path).write_tool_result("t", "c", "text")
    assert [p.name for p in target.parent.iterdir()] == ["c.txt"]  # temp and hash files removed


async def test_read_only_root_is_an_error() -> None:
    """/proc refuses new entries even to root: a read-only file system we can rely on here."""
    with pytest.raises(WorkdirError):
        await Workdir("/proc").write_tool_result("t", "c", "text")


async def test_local_file_written_without_a_hash_is_hashed_on_read(tmp_path: Path) -> None:
    """Files from before hashes were stored beside them stay readable, with their real hash."""
    (tmp_path / "t" / "tool-results").mkdir(parents=True)
    (tmp_path / "t" / "tool-results" / "old.txt").write_text("legacy")
    stream = await Workdir(tmp_path).open("t", "tool-results/old.txt")
    assert stream.sha256 == hashlib.sha256(b"legacy").hexdigest()
    assert await stream.read() == b"legacy"


async def test_escaping_symlink_is_refused_inner_symlink_allowed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    workdir = Workdir(root)
    record = await workdir.write_tool_result("t", "c", "inside text")
    (root / "t" / "escape.txt").symlink_to(outside)
    with pytest.raises(WorkdirPathError):
        await workdir.read_text("t", "escape.txt")
    (root / "t" / "alias.txt").symlink_to(root / "t" / record.path)
    assert (await workdir.read_text("t", "alias.txt"))[0] == "inside text"
    # another thread's folder is outside this thread's folder
    await workdir.write_tool_result("other", "c", "other thread")
    (root / "t" / "peek").symlink_to(root / "other")
    with pytest.raises(WorkdirPathError):
        await workdir.read_text("t", "peek/tool-results/c.txt")


async def test_deprecated_s3_settings_still_reach_the_bucket(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``THREADKEEPER_S3_*`` (before ``AWS_*``) work for one more release, without any AWS_*."""
    for name in s3_server.aws_env():
        monkeypatch.delenv(name, raising=False)
    bucket = s3_server.new_bucket()
    settings = make_settings("", tmp_path, **s3_server.legacy_settings(bucket, "old"))
    workdir = open_workdir(settings.workdir)
    record = await workdir.write_tool_result("thread", "call", TEXT)
    head = s3_server.client().head_object(Bucket=bucket, Key=f"old/{record.key}")
    assert head["Metadata"]["sha256"] == record.sha256


async def test_aws_variables_alone_name_the_s3_endpoint_and_credentials(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only ``THREADKEEPER_WORKDIR_URL`` is ours: obstore reads the standard ``AWS_*`` itself
    (point ``AWS_ENDPOINT_URL`` elsewhere and the same settings no longer reach the bucket)."""
    bucket = s3_server.new_bucket()
    settings = make_settings("", tmp_path, **s3_server.settings(bucket)).workdir
    for name, value in s3_server.aws_env().items():
        monkeypatch.setenv(name, value)
    record = await open_workdir(settings).write_tool_result("thread", "call", TEXT)
    assert s3_server.client().head_object(Bucket=bucket, Key=f"workdir/{record.key}")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    with pytest.raises(WorkdirError):
        await open_workdir(settings).check()
