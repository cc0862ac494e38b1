"""The checkpoint saver's write statements (app/db/checkpointer.py).

Inserts as ``INSERT ... SELECT ... WHERE NOT EXISTS`` instead of upstream's ``ON CONFLICT``: a
speculative insertion (any ON CONFLICT insert) writes a HEAP_CONFIRM record besides the row, ~0.9
KB of WAL per trivial turn over the three tables. Two writers racing on one key get a unique
violation instead, and the write is redone with upstream's statements, so the outcome is
upstream's.

A checkpoint (its changed channels' blobs and its row) is ONE statement, and so are a task's
writes: the rows travel as arrays (``unnest``), each statement atomic on its own. Upstream sends
a statement per row in a pipeline; a worker's turn writes about 19 rows in 9 operations, and on
the client each row cost about as much as a whole statement (its query conversion, its
parameters' dumping, its result), each operation a pipeline's enter and sync besides
(``benchmarks/checkpoint_writes.py`` compares the two). The per-row statements stay for that
comparison (``BoundedPostgresSaver.row_statements``) and as the shape of upstream's, which the
fallback sends.
"""

from __future__ import annotations

from typing import Any

#: One checkpoint: its blob rows (``channels``, ``versions``, ``types``, ``blobs``: one array
#: item per changed channel) and its row, inserted or updated (a put of the same id again, as
#: upstream's upsert does). The blob insert is a data-modifying ``WITH``: PostgreSQL runs it
#: once and to completion whether or not the main statement reads it.
PUT_CHECKPOINT_SQL = """
    WITH b (channel, version, type, blob) AS (
        SELECT * FROM unnest(
            %(channels)s::text[], %(versions)s::text[], %(types)s::text[], %(blobs)s::bytea[]
        )
    ),
    inserted AS (
        INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
        SELECT %(thread_id)s::text, %(checkpoint_ns)s::text, b.channel, b.version, b.type, b.blob
        FROM b
        WHERE NOT EXISTS (
            SELECT 1 FROM checkpoint_blobs x
            WHERE x.thread_id = %(thread_id)s::text AND x.checkpoint_ns = %(checkpoint_ns)s::text
                AND x.channel = b.channel AND x.version = b.version
        )
    ),
    updated AS (
        UPDATE checkpoints c
        SET checkpoint = %(checkpoint)s::jsonb, metadata = %(metadata)s::jsonb
        WHERE c.thread_id = %(thread_id)s::text AND c.checkpoint_ns = %(checkpoint_ns)s::text
            AND c.checkpoint_id = %(checkpoint_id)s::text
        RETURNING 1
    )
    INSERT INTO checkpoints
        (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata)
    SELECT %(thread_id)s::text, %(checkpoint_ns)s::text, %(checkpoint_id)s::text,
        %(parent_id)s::text, %(checkpoint)s::jsonb, %(metadata)s::jsonb
    WHERE NOT EXISTS (SELECT 1 FROM updated)
"""

#: A task's writes (``idx``, ``channels``, ``types``, ``blobs``: one array item per write); a
#: write already stored (the same task and index) is kept, as upstream's ``DO NOTHING``.
PUT_WRITES_SQL = """
    INSERT INTO checkpoint_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    SELECT %(thread_id)s::text, %(checkpoint_ns)s::text, %(checkpoint_id)s::text,
        %(task_id)s::text, %(task_path)s::text, w.idx, w.channel, w.type, w.blob
    FROM unnest(
        %(idx)s::integer[], %(channels)s::text[], %(types)s::text[], %(blobs)s::bytea[]
    ) AS w (idx, channel, type, blob)
    WHERE NOT EXISTS (
        SELECT 1 FROM checkpoint_writes x
        WHERE x.thread_id = %(thread_id)s::text AND x.checkpoint_ns = %(checkpoint_ns)s::text
            AND x.checkpoint_id = %(checkpoint_id)s::text AND x.task_id = %(task_id)s::text
            AND x.idx = w.idx
    )
"""

#: The same, a statement per row (upstream's parameters, in upstream's order).
INSERT_BLOB_SQL = """
    INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT * FROM (VALUES (%s, %s, %s, %s, %s, %s::bytea))
        AS v (thread_id, checkpoint_ns, channel, version, type, blob)
    WHERE NOT EXISTS (
        SELECT 1 FROM checkpoint_blobs b
        WHERE b.thread_id = v.thread_id AND b.checkpoint_ns = v.checkpoint_ns
            AND b.channel = v.channel AND b.version = v.version
    )
"""
UPSERT_CHECKPOINT_SQL = """
    WITH v (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata)
        AS (VALUES (%s, %s, %s, %s, %s::jsonb, %s::jsonb)),
    updated AS (
        UPDATE checkpoints c SET checkpoint = v.checkpoint, metadata = v.metadata FROM v
        WHERE c.thread_id = v.thread_id AND c.checkpoint_ns = v.checkpoint_ns
            AND c.checkpoint_id = v.checkpoint_id
        RETURNING 1
    )
    INSERT INTO checkpoints
        (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata)
    SELECT * FROM v WHERE NOT EXISTS (SELECT 1 FROM updated)
"""
INSERT_WRITE_SQL = """
    INSERT INTO checkpoint_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    SELECT * FROM (VALUES (%s, %s, %s, %s, %s, %s::integer, %s, %s, %s::bytea))
        AS v (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    WHERE NOT EXISTS (
        SELECT 1 FROM checkpoint_writes w
        WHERE w.thread_id = v.thread_id AND w.checkpoint_ns = v.checkpoint_ns
            AND w.checkpoint_id = v.checkpoint_id AND w.task_id = v.task_id AND w.idx = v.idx
    )
"""


def put_checkpoint_params(
    blob_rows: list[tuple[Any, ...]], checkpoint_row: tuple[Any, ...]
) -> dict[str, Any]:
    """``PUT_CHECKPOINT_SQL``'s parameters from upstream's rows: the blob rows
    ``(thread_id, ns, channel, version, type, blob)`` and the checkpoint row
    ``(thread_id, ns, id, parent_id, checkpoint, metadata)``."""
    names = ("thread_id", "checkpoint_ns", "checkpoint_id", "parent_id", "checkpoint", "metadata")
    return {
        **dict(zip(names, checkpoint_row, strict=True)),
        **_columns(blob_rows, 2, ("channels", "versions", "types", "blobs")),
    }


def put_writes_params(write_rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """``PUT_WRITES_SQL``'s parameters from upstream's rows (``_dump_writes``: thread, ns,
    checkpoint, task, task path, idx, channel, type, blob; at least one row, all of one task)."""
    names = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path")
    return {
        **dict(zip(names, write_rows[0][:5], strict=True)),
        **_columns(write_rows, 5, ("idx", "channels", "types", "blobs")),
    }


def _columns(rows: list[tuple[Any, ...]], first: int, names: tuple[str, ...]) -> dict[str, list]:
    """The rows' fields from index ``first`` on, one array each (``unnest``'s parameters)."""
    return {name: [row[i] for row in rows] for i, name in enumerate(names, first)}
