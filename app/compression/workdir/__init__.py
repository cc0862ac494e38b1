"""Per-thread working storage where full tool results are offloaded.

Layout: ``<thread_id>/tool-results/<tool_call_id>.txt`` under the workdir root. ``Workdir``
(``facade.py``) is what every caller uses; a ``WorkdirStore`` backend keeps the bytes:
``LocalStore`` (``local.py``, a folder, the default) or ``S3Store`` (``s3.py``, any
S3-compatible service) so that several hosts can read what any worker offloaded. ``base.py``
holds what all of them share and imports none of them. The thread's index of offloaded
originals (``index.py``) is kept beside the store: PostgreSQL in the app, memory without one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.compression.workdir.base import (
    CHUNK_BYTES,
    INDEX_PATH,
    MAX_PATH_CHARS,
    TOOL_RESULTS_DIR,
    OffloadRecord,
    PutItem,
    PutOutcome,
    StoredObject,
    ToolResultText,
    WorkdirError,
    WorkdirIntegrityError,
    WorkdirNotFoundError,
    WorkdirPathError,
    WorkdirStore,
    check_relpath,
    safe_name,
)
from app.compression.workdir.facade import Workdir, WorkdirStream
from app.compression.workdir.index import MemoryIndex, PgIndex, WorkdirIndex, WorkdirIndexError
from app.compression.workdir.local import LocalStore
from app.compression.workdir.s3 import S3Store, deprecated_s3_config

if TYPE_CHECKING:
    from app.config import WorkdirSettings

__all__ = [
    "CHUNK_BYTES",
    "INDEX_PATH",
    "MAX_PATH_CHARS",
    "TOOL_RESULTS_DIR",
    "LocalStore",
    "MemoryIndex",
    "OffloadRecord",
    "PgIndex",
    "PutItem",
    "PutOutcome",
    "S3Store",
    "StoredObject",
    "ToolResultText",
    "Workdir",
    "WorkdirError",
    "WorkdirIndex",
    "WorkdirIndexError",
    "WorkdirIntegrityError",
    "WorkdirNotFoundError",
    "WorkdirPathError",
    "WorkdirStore",
    "WorkdirStream",
    "check_relpath",
    "open_workdir",
    "safe_name",
]


def open_workdir(settings: WorkdirSettings, index: WorkdirIndex | None = None) -> Workdir:
    """The deployment's Workdir: ``THREADKEEPER_WORKDIR_URL=s3://bucket/prefix`` or the folder
    ``THREADKEEPER_WORKDIR_ROOT`` (created here); ``index``: the thread's recall index (the
    app passes ``PgIndex``)."""
    if settings.workdir_url:
        legacy = deprecated_s3_config(
            settings.s3_endpoint_url,
            settings.s3_region,
            settings.s3_access_key_id,
            settings.s3_secret_access_key,
        )
        return Workdir(S3Store(settings.workdir_url, config=legacy), index)
    settings.workdir_path.mkdir(parents=True, exist_ok=True)
    return Workdir(LocalStore(settings.workdir_path), index)
