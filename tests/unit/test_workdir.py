"""Workdir: atomic, verifiable offload files confined to the thread folder."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from app.agents.workdir import (
    Workdir,
    WorkdirError,
    WorkdirNotFoundError,
    WorkdirPathError,
    safe_name,
)

TEXT = "Zürich 東京 results\n" * 500


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    workdir = Workdir(tmp_path)
    record = workdir.write_tool_result("thread-1", "call_abc", TEXT)
    data = TEXT.encode("utf-8")
    assert record.path == "tool-results/call_abc.txt"
    assert record.abspath == tmp_path / "thread-1" / "tool-results" / "call_abc.txt"
    assert record.sha256 == hashlib.sha256(data).hexdigest()
    assert record.chars == len(TEXT)
    assert record.bytes == len(data)
    assert record.abspath.read_bytes() == data
    text, total, sha = workdir.read_text("thread-1", record.path, offset=10, limit=25)
    assert text == TEXT[10:35]
    assert total == len(TEXT)
    assert sha == record.sha256
    full, _, _ = workdir.read_text("thread-1", record.path)
    assert full == TEXT
    # no temp files left behind
    assert sorted(p.name for p in record.abspath.parent.iterdir()) == ["call_abc.txt"]


def test_reused_tool_call_id_never_replaces_an_original(tmp_path: Path) -> None:
    """Some providers reuse ids like call_0: the first file must keep matching its preview."""
    workdir = Workdir(tmp_path)
    first = workdir.write_tool_result("t", "c1", "first")
    second = workdir.write_tool_result("t", "c1", "second version")
    assert first.path == "tool-results/c1.txt" and second.path != first.path
    assert workdir.read_text("t", first.path) == ("first", 5, first.sha256)
    assert workdir.read_text("t", second.path)[0] == "second version"
    assert workdir.read_text("t", second.path)[2] == second.sha256
    # Writing the same content again is idempotent: same record, no new file.
    again = workdir.write_tool_result("t", "c1", "second version")
    assert again.path == second.path and again.sha256 == second.sha256
    assert len(list(first.abspath.parent.iterdir())) == 2


def test_overlong_paths_are_refused(tmp_path: Path) -> None:
    workdir = Workdir(tmp_path)
    workdir.write_tool_result("t", "c", "text")
    for bad in ("a" * 5000, "tool-results/" + "b" * 300):
        with pytest.raises(WorkdirPathError):
            workdir.read_text("t", bad)


@pytest.mark.parametrize("raw", ["../../etc/passwd", "call/with/slash", "..", ".hidden", "é"])
def test_unsafe_tool_call_ids_are_hashed(tmp_path: Path, raw: str) -> None:
    workdir = Workdir(tmp_path)
    record = workdir.write_tool_result("t", raw, "x")
    assert record.abspath.parent == tmp_path / "t" / "tool-results"
    assert record.path == f"tool-results/{safe_name(raw)}.txt"
    assert safe_name(raw).startswith("h-")


def test_missing_root_is_an_error_and_not_created(tmp_path: Path) -> None:
    root = tmp_path / "missing"
    with pytest.raises(WorkdirError):
        Workdir(root).write_tool_result("t", "c", "text")
    assert not root.exists()


def test_root_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "file"
    root.write_text("not a directory")
    with pytest.raises(WorkdirError):
        Workdir(root).write_tool_result("t", "c", "text")


def test_target_that_is_a_directory_fails_cleanly(tmp_path: Path) -> None:
    target = tmp_path / "t" / "tool-results" / "c.txt"
    target.mkdir(parents=True)
    with pytest.raises(WorkdirError):
        Workdir(tmp_path).write_tool_result("t", "c", "text")
    assert [p.name for p in target.parent.iterdir()] == ["c.txt"]  # temp file removed


def test_read_only_root_is_an_error() -> None:
    """/proc refuses new entries even to root: a read-only file system we can rely on here."""
    with pytest.raises(WorkdirError):
        Workdir("/proc").write_tool_result("t", "c", "text")


@pytest.mark.parametrize(
    "bad", ["/etc/passwd", "../other/tool-results/c.txt", "tool-results/../../x", "", "C:\\x"]
)
def test_paths_leaving_the_thread_folder_are_refused(tmp_path: Path, bad: str) -> None:
    workdir = Workdir(tmp_path)
    workdir.write_tool_result("t", "c", "text")
    with pytest.raises(WorkdirPathError):
        workdir.read_text("t", bad)
    assert issubclass(WorkdirPathError, ValueError)


def test_escaping_symlink_is_refused_inner_symlink_allowed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    workdir = Workdir(root)
    record = workdir.write_tool_result("t", "c", "inside text")
    (root / "t" / "escape.txt").symlink_to(outside)
    with pytest.raises(WorkdirPathError):
        workdir.read_text("t", "escape.txt")
    (root / "t" / "alias.txt").symlink_to(record.abspath)
    assert workdir.read_text("t", "alias.txt")[0] == "inside text"
    # another thread's folder is outside this thread's folder
    workdir.write_tool_result("other", "c", "other thread")
    (root / "t" / "peek").symlink_to(root / "other")
    with pytest.raises(WorkdirPathError):
        workdir.read_text("t", "peek/tool-results/c.txt")


def test_missing_file_and_resolve(tmp_path: Path) -> None:
    workdir = Workdir(tmp_path)
    with pytest.raises(WorkdirNotFoundError) as info:
        workdir.read_text("t", "tool-results/none.txt")
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, WorkdirError)
    record = workdir.write_tool_result("t", "c", "x")
    assert workdir.resolve("t", "tool-results/c.txt") == record.abspath.resolve()
    with pytest.raises(WorkdirPathError):
        workdir.read_text("t", record.path, offset=-1)
