"""The keep-latest prune of one thread's checkpoints in ONE statement (one round trip).

langgraph-checkpoint-postgres' ``aprune(strategy="keep_latest")`` is general (subgraph
namespaces, pre-v4 pending sends, DeltaChannel refusal) and costs about 14 round trips per call
(a refusal probe, then a REPEATABLE READ transaction of a dozen statements), paid after every
turn. For the threads this service writes (one root namespace, v4+ checkpoints, no
DeltaChannel) the same result fits one statement: its data-modifying CTEs share one snapshot,
so, as upstream's transaction, what a run saves meanwhile is neither seen nor deleted. Anything
else (another namespace, an old or delta checkpoint, an inline ``true`` value that may be a
DeltaChannel snapshot marker) is reported as ``needs_general`` and left untouched, and the
caller runs upstream's prune instead.

What it deletes is what upstream's deletes: every checkpoint of the root namespace but the
latest, their pending writes, the blobs the latest does not use, and the latest's link to its
deleted parent; except that the blobs a delta-stored channel of the latest builds on (its chain,
app/db/checkpoint_delta.py) are kept, until a whole version starts a new chain. Upstream's prune does not know chains, so a
thread that needs it and has delta blobs is not pruned at all (``has_deltas``).
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncCursor

KEEP_LATEST_SQL = """
WITH RECURSIVE head AS (
    SELECT checkpoint_id, checkpoint -> 'channel_versions' AS versions
    FROM checkpoints
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = ''
    ORDER BY checkpoint_id DESC
    LIMIT 1
),
general AS (
    SELECT 1 FROM checkpoints c
    WHERE c.thread_id = %(thread_id)s AND (
        c.checkpoint_ns <> ''
        OR coalesce((c.checkpoint ->> 'v')::int, 0) < 4
        OR c.metadata ? 'counters_since_delta_snapshot'
        OR c.metadata ? 'delta_writes_versioned'
        OR jsonb_path_exists(c.checkpoint -> 'channel_values', '$.* ? (@ == true)')
    )
    LIMIT 1
),
gone AS (
    DELETE FROM checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
      AND c.checkpoint_id < (SELECT checkpoint_id FROM head)
      AND NOT EXISTS (SELECT 1 FROM general)
    RETURNING c.checkpoint_id, c.checkpoint -> 'channel_versions' AS versions
),
writes AS (
    DELETE FROM checkpoint_writes w
    WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = ''
      AND w.checkpoint_id IN (SELECT checkpoint_id FROM gone)
),
chain AS (
    SELECT b.channel, b.version, b.type
    FROM head CROSS JOIN LATERAL jsonb_each_text(head.versions) AS v
    JOIN checkpoint_blobs b
      ON b.thread_id = %(thread_id)s AND b.checkpoint_ns = ''
      AND b.channel = v.key AND b.version = v.value
    UNION ALL
    SELECT b.channel, b.version, b.type
    FROM chain c
    JOIN checkpoint_blobs b
      ON b.thread_id = %(thread_id)s AND b.checkpoint_ns = ''
      AND b.channel = c.channel AND b.version = split_part(c.type, '|', 4)
    WHERE left(c.type, 6) = 'delta|'
),
-- Every blob of the thread the head neither names nor builds on, not only those the deleted
-- checkpoints named: a version kept as a chain link when its checkpoint went is named by no
-- checkpoint once a whole version starts a new chain, and nothing else would ever free it. The
-- run that prunes holds the thread, so no blob of a checkpoint still being written is here.
freed AS (
    SELECT b.channel, b.version FROM checkpoint_blobs b
    WHERE b.thread_id = %(thread_id)s AND b.checkpoint_ns = ''
      AND NOT EXISTS (SELECT 1 FROM general)
    EXCEPT
    SELECT v.key, v.value FROM head CROSS JOIN LATERAL jsonb_each_text(head.versions) AS v
    EXCEPT
    SELECT channel, version FROM chain
),
blobs AS (
    DELETE FROM checkpoint_blobs b
    USING freed f
    WHERE b.thread_id = %(thread_id)s AND b.checkpoint_ns = ''
      AND b.channel = f.channel AND b.version = f.version
),
unlinked AS (
    UPDATE checkpoints c SET parent_checkpoint_id = NULL
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
      AND c.checkpoint_id = (SELECT checkpoint_id FROM head)
      AND c.parent_checkpoint_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM general)
)
SELECT EXISTS (SELECT 1 FROM general) AS needs_general
"""


async def keep_latest(cur: AsyncCursor[Any], thread_id: str) -> bool:
    """Prune ``thread_id`` to its latest checkpoint in one statement; False (nothing done) when
    the thread needs upstream's general prune."""
    # Unprepared, as upstream's prune: planned knowing this thread's row counts.
    await cur.execute(KEEP_LATEST_SQL, {"thread_id": thread_id}, prepare=False)
    row = await cur.fetchone()
    return row is not None and not row["needs_general"]


HAS_DELTAS_SQL = (
    "SELECT EXISTS (SELECT 1 FROM checkpoint_blobs "
    "WHERE thread_id = %s AND left(type, 6) = 'delta|') AS has_deltas"
)


async def has_deltas(cur: AsyncCursor[Any], thread_id: str) -> bool:
    """Whether any of the thread's blobs is a delta (upstream's prune would break its chain)."""
    await cur.execute(HAS_DELTAS_SQL, (thread_id,))
    row = await cur.fetchone()
    return bool(row and row["has_deltas"])


#: The turn-keeping prune (issue 36): what a client can branch from stays, the steps in between
#: go. Kept, per root-namespace checkpoint: a run's input checkpoint (``source = 'input'``: the
#: state before its input, what Agent Chat UI's Edit forks from), the first checkpoint after one
#: (the input applied: what Refresh re-runs the answer from), the parent of one (the end of the
#: turn before), and every leaf (a branch's head: the current one, a replaced branch's end, a
#: run's interrupt). Each kept checkpoint's parent becomes its nearest kept ancestor, so
#: ``parent_checkpoint`` still walks the branch; the pending writes of every checkpoint but the
#: branch heads and every blob no kept checkpoint names or builds on (its delta chain) go. Same
#: ``general`` refusal as ``KEEP_LATEST_SQL``. Storage (50 tool turns of a model -> tools ->
#: model graph, tests/integration/test_checkpoint_turns.py's): 131 KB and 150 rows against
#: 260 KB and 250 rows unpruned; ``keep_latest`` kept 2.3 KB and one row, and no history.
KEEP_TURNS_SQL = """
WITH RECURSIVE cps AS MATERIALIZED (
    SELECT checkpoint_id, parent_checkpoint_id, metadata ->> 'source' AS source,
        checkpoint -> 'channel_versions' AS versions
    FROM checkpoints
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = ''
),
general AS (
    SELECT 1 FROM checkpoints c
    WHERE c.thread_id = %(thread_id)s AND (
        c.checkpoint_ns <> ''
        OR coalesce((c.checkpoint ->> 'v')::int, 0) < 4
        OR c.metadata ? 'counters_since_delta_snapshot'
        OR c.metadata ? 'delta_writes_versioned'
        OR jsonb_path_exists(c.checkpoint -> 'channel_values', '$.* ? (@ == true)')
    )
    LIMIT 1
),
keep AS MATERIALIZED (
    SELECT c.checkpoint_id, c.versions FROM cps c
    WHERE c.source = 'input'
       OR EXISTS (SELECT 1 FROM cps p
                  WHERE p.checkpoint_id = c.parent_checkpoint_id AND p.source = 'input')
       OR EXISTS (SELECT 1 FROM cps ch
                  WHERE ch.parent_checkpoint_id = c.checkpoint_id AND ch.source = 'input')
       OR NOT EXISTS (SELECT 1 FROM cps ch WHERE ch.parent_checkpoint_id = c.checkpoint_id)
),
gone AS (
    DELETE FROM checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
      AND c.checkpoint_id NOT IN (SELECT checkpoint_id FROM keep)
      AND NOT EXISTS (SELECT 1 FROM general)
    RETURNING c.checkpoint_id
),
-- The pending writes of every checkpoint that is not a branch head go too: a later checkpoint
-- holds what they wrote, and a run from a kept one starts afresh (LangGraph forks it first).
-- A head's (an interrupt's, a step finished before a crash) stay.
writes AS (
    DELETE FROM checkpoint_writes w
    WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = ''
      AND NOT EXISTS (SELECT 1 FROM general)
      AND EXISTS (SELECT 1 FROM cps ch WHERE ch.parent_checkpoint_id = w.checkpoint_id)
),
up AS (
    SELECT k.checkpoint_id AS kept, c.parent_checkpoint_id AS cur, 0 AS depth
    FROM keep k JOIN cps c ON c.checkpoint_id = k.checkpoint_id
    WHERE c.parent_checkpoint_id IS NOT NULL
      AND c.parent_checkpoint_id NOT IN (SELECT checkpoint_id FROM keep)
    UNION ALL
    SELECT up.kept, c.parent_checkpoint_id, up.depth + 1
    FROM up JOIN cps c ON c.checkpoint_id = up.cur
    WHERE c.parent_checkpoint_id IS NOT NULL AND up.cur NOT IN (SELECT checkpoint_id FROM keep)
),
relinked AS (
    UPDATE checkpoints c SET parent_checkpoint_id = (
        SELECT up.cur FROM up
        WHERE up.kept = c.checkpoint_id AND up.cur IN (SELECT checkpoint_id FROM keep)
        ORDER BY up.depth LIMIT 1
    )
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
      AND c.checkpoint_id IN (SELECT kept FROM up)
      AND NOT EXISTS (SELECT 1 FROM general)
),
chain AS (
    SELECT b.channel, b.version, b.type
    FROM keep CROSS JOIN LATERAL jsonb_each_text(keep.versions) AS v
    JOIN checkpoint_blobs b
      ON b.thread_id = %(thread_id)s AND b.checkpoint_ns = ''
      AND b.channel = v.key AND b.version = v.value
    UNION
    SELECT b.channel, b.version, b.type
    FROM chain c
    JOIN checkpoint_blobs b
      ON b.thread_id = %(thread_id)s AND b.checkpoint_ns = ''
      AND b.channel = c.channel AND b.version = split_part(c.type, '|', 4)
    WHERE left(c.type, 6) = 'delta|'
),
blobs AS (
    DELETE FROM checkpoint_blobs b
    WHERE b.thread_id = %(thread_id)s AND b.checkpoint_ns = ''
      AND NOT EXISTS (SELECT 1 FROM general)
      AND NOT EXISTS (SELECT 1 FROM chain
                      WHERE chain.channel = b.channel AND chain.version = b.version)
)
SELECT EXISTS (SELECT 1 FROM general) AS needs_general
"""


async def keep_turns(cur: AsyncCursor[Any], thread_id: str) -> bool:
    """Prune ``thread_id`` to its turn boundaries and branch heads in one statement; False
    (nothing done) when the thread needs upstream's general prune."""
    await cur.execute(KEEP_TURNS_SQL, {"thread_id": thread_id}, prepare=False)
    row = await cur.fetchone()
    return row is not None and not row["needs_general"]
