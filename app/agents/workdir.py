"""Per-thread working folder where full tool results are offloaded.

Layout: ``<root>/<thread_id>/tool-results/<tool_call_id>.txt`` plus ``<root>/<thread_id>/index.jsonl``,
one JSON line per offloaded result (path, tool, args, ids/URLs/titles, sha256) so every original
stays findable however old it is. The root must already exist
(the app creates it at start-up): a missing root is a deployment error we report instead of
silently creating folders in an unexpected place. Writes are atomic (temp file + fsync +
``os.replace``) so a reader never sees a half-written file, and every read is confined to the
thread's own folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

TOOL_RESULTS_DIR = "tool-results"
#: The thread's index of offloaded results (JSON lines), relative to the thread folder.
INDEX_PATH = "index.jsonl"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


#: Longest relative path accepted (PATH_MAX); components are limited to 255 (NAME_MAX).
MAX_PATH_CHARS = 4096


class WorkdirError(Exception):
    """The Workdir cannot be used (missing root, unwritable, I/O failure)."""


class WorkdirNotFoundError(WorkdirError, FileNotFoundError):
    """The requested file does not exist in the thread's folder."""


class WorkdirPathError(ValueError):
    """A path that would leave the thread's folder (absolute, ``..``, escaping symlink...)."""


@dataclass(frozen=True, slots=True)
class OffloadRecord:
    """Where a tool result was written and how to verify it."""

    #: Path relative to the thread folder, e.g. ``tool-results/call_1.txt`` (POSIX separators).
    path: str
    #: Absolute path on disk.
    abspath: Path
    #: SHA-256 (hex) of the UTF-8 bytes of the full text.
    sha256: str
    chars: int
    bytes: int
    tool_call_id: str = ""
    #: The identical original was already stored (nothing was written this time).
    existed: bool = False


def safe_name(raw: str) -> str:
    """A file-name-safe form of an identifier: kept if ``[A-Za-z0-9_.-]``, else hashed."""
    if _SAFE_NAME.fullmatch(raw) and not raw.startswith("."):
        return raw
    return "h-" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:40]


class Workdir:
    """Confined file access for one deployment's workdir root."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).absolute()

    def thread_dir(self, thread_id: str) -> Path:
        """The thread's folder (not created); unusual thread ids are hashed, never trusted."""
        if not thread_id:
            raise WorkdirPathError("empty thread id")
        return self.root / safe_name(str(thread_id))

    # --- writing ------------------------------------------------------------------------------
    def write_tool_result(
        self,
        thread_id: str,
        tool_call_id: str,
        text: str,
        *,
        index: Mapping[str, object] | None = None,
    ) -> OffloadRecord:
        """Atomically store the full text of a tool result; raise ``WorkdirError`` on failure.

        ``index``: extra fields (tool, args, ids...) of the thread's index entry, appended after
        the file is stored; a failed append raises too, so the caller shrinks nothing that the
        index cannot find. An original already stored and indexed is not indexed twice.
        """
        record = self._store_tool_result(thread_id, tool_call_id, text)
        if index is not None:
            entry = {
                "path": record.path,
                "tool_call_id": tool_call_id,
                "sha256": record.sha256,
                "chars": record.chars,
                **index,
            }
            if not record.existed or not any(
                e.get("path") == record.path and e.get("sha256") == record.sha256
                for e in self.read_index(thread_id)
            ):
                self.append_index(thread_id, entry)
        return record

    def append_index(self, thread_id: str, entry: Mapping[str, object]) -> None:
        """Append one entry to the thread's index as a single ``O_APPEND`` write + fsync.

        One write per line: concurrent appenders cannot interleave within a line, and a torn
        last line after a crash is skipped by ``read_index``.
        """
        line = (json.dumps(dict(entry), ensure_ascii=False, sort_keys=True) + "\n").encode()
        thread_dir = self.thread_dir(thread_id)
        if not self.root.is_dir():
            raise WorkdirError(f"workdir root does not exist or is not a directory: {self.root}")
        try:
            thread_dir.mkdir(exist_ok=True)
            fd = os.open(thread_dir / INDEX_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if os.write(fd, line) != len(line):
                    raise OSError("short write to the index")
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise WorkdirError(
                f"cannot append to {INDEX_PATH} for thread {thread_id}: {exc}"
            ) from exc

    def read_index(self, thread_id: str) -> list[dict[str, object]]:
        """The thread's index entries, oldest first ([] when nothing was offloaded yet)."""
        try:
            text, _, _ = self.read_text(thread_id, INDEX_PATH)
        except WorkdirNotFoundError:
            return []
        entries: list[dict[str, object]] = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn last line (crash mid-append) is not an entry
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                entries.append(entry)
        return entries

    def _store_tool_result(self, thread_id: str, tool_call_id: str, text: str) -> OffloadRecord:
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        relpath = f"{TOOL_RESULTS_DIR}/{safe_name(tool_call_id)}.txt"
        thread_dir = self.thread_dir(thread_id)
        if not self.root.is_dir():
            raise WorkdirError(f"workdir root does not exist or is not a directory: {self.root}")
        target_dir = thread_dir / TOOL_RESULTS_DIR
        target = thread_dir / relpath
        existing = _sha256_of(target)
        if existing is not None and existing != digest:
            # A provider reused the tool-call id: never replace an original a preview names.
            relpath = f"{TOOL_RESULTS_DIR}/{safe_name(tool_call_id)}-{digest[:16]}.txt"
            target = thread_dir / relpath
            existing = _sha256_of(target)
        record = OffloadRecord(
            path=relpath,
            abspath=target,
            sha256=digest,
            chars=len(text),
            bytes=len(data),
            tool_call_id=tool_call_id,
            existed=existing == digest,
        )
        if record.existed:
            return record  # already stored, byte for byte
        tmp_name: str | None = None
        try:
            thread_dir.mkdir(exist_ok=True)
            target_dir.mkdir(exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=target_dir, prefix=".tmp-", suffix=".part")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_name, target)
            tmp_name = None
            _fsync_dir(target_dir)
        except OSError as exc:
            raise WorkdirError(f"cannot write {relpath} for thread {thread_id}: {exc}") from exc
        finally:
            if tmp_name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name)
        return record

    # --- reading ------------------------------------------------------------------------------
    def resolve(self, thread_id: str, relpath: str) -> Path:
        """Absolute path of ``relpath`` inside the thread folder; refuse anything escaping it."""
        if not relpath or "\x00" in relpath:
            raise WorkdirPathError("empty or invalid path")
        if len(relpath) > MAX_PATH_CHARS or any(len(p) > 255 for p in relpath.split("/")):
            raise WorkdirPathError("path too long")
        posix = PurePosixPath(relpath.replace("\\", "/"))
        if posix.is_absolute() or PureWindowsPath(relpath).drive or relpath.startswith("~"):
            raise WorkdirPathError(f"absolute paths are not allowed: {relpath!r}")
        if any(part == ".." for part in posix.parts):
            raise WorkdirPathError(f"'..' is not allowed in workdir paths: {relpath!r}")
        base = self.thread_dir(thread_id)
        candidate = base.joinpath(*posix.parts)
        real_base = Path(os.path.realpath(base))
        real = Path(os.path.realpath(candidate))
        if real != real_base and not real.is_relative_to(real_base):
            raise WorkdirPathError(f"path escapes the thread folder: {relpath!r}")
        return real

    def read_text(
        self, thread_id: str, relpath: str, offset: int = 0, limit: int | None = None
    ) -> tuple[str, int, str]:
        """Return (text[offset:offset+limit], total_chars, sha256 of the full file)."""
        if offset < 0 or (limit is not None and limit < 0):
            raise WorkdirPathError("offset and limit must be >= 0")
        path = self.resolve(thread_id, relpath)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise WorkdirNotFoundError(f"no such workdir file: {relpath}") from exc
        except IsADirectoryError as exc:
            raise WorkdirNotFoundError(f"not a file: {relpath}") from exc
        except OSError as exc:
            raise WorkdirError(f"cannot read {relpath}: {exc}") from exc
        text = data.decode("utf-8", errors="replace")
        end = None if limit is None else offset + limit
        return text[offset:end], len(text), hashlib.sha256(data).hexdigest()


def _sha256_of(path: Path) -> str | None:
    """Digest of an existing regular file, None when there is none (or it cannot be read)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    except OSError:
        return None


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself; not supported everywhere, so best effort."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
