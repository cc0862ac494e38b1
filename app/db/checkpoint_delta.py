"""The messages channel stored as deltas: each new version holds only what changed.

LangGraph stores every changed channel's whole value at every step, and the messages channel is
the whole model-visible view: a trivial turn (model -> tool -> model) wrote the view four times
(``checkpoint_blobs`` + TOAST was ~3/4 of a turn's WAL, growing with the thread). Here a new
version of a list channel is, when it can be, a *delta*: "the first ``k`` items of version
``base``, then these items"; a read follows the chain back to a full version (one recursive
subquery in the checkpoint read itself, no extra round trip) and rebuilds the list. After
``MAX_DEPTH`` deltas the next version is written whole again, so reads stay short and a chain's
cost is amortized: per turn only the new messages are written, plus a whole view every few turns.

Safety rules (the blob a delta names must exist whenever the delta is read):
- a delta is written only on top of the version the *parent* checkpoint holds, and only when this
  process wrote that parent itself and saw its write succeed (``Lineage``); anything else (another
  process wrote the thread, an update from an older checkpoint, a failed or still unfinished
  write) writes the whole value;
- items are compared by their serialized bytes, so a message changed in place is never taken for
  the stored one;
- the prune keeps every blob on the latest checkpoint's chain (app/db/checkpoint_prune.py), and
  deleting a thread deletes them all.

The blob's ``type`` column carries the link (``delta|<serde type>|<k>|<base version>``), so SQL can
follow chains without decoding blobs.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

#: List channels stored as deltas.
DELTA_CHANNELS = frozenset({"messages"})
#: Deltas in a row before the next version is written whole.
MAX_DEPTH = 32
#: Threads whose last write this process remembers.
LINEAGE_THREADS = 4096
DELTA_PREFIX = "delta|"


@dataclass(frozen=True, slots=True)
class Written:
    """What a successful write left for a thread's channel: at checkpoint ``checkpoint_id`` the
    channel is at ``version``, whose items serialize to ``digests``, ``depth`` deltas deep."""

    checkpoint_id: str
    version: str
    digests: tuple[bytes, ...]
    depth: int


class Lineage:
    """Per (thread, namespace, channel): the channel as of the last checkpoint this process wrote
    successfully (bounded, least recently written threads forgotten)."""

    def __init__(self, size: int = LINEAGE_THREADS) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str, str], Written] = OrderedDict()

    def base_for(self, key: tuple[str, str, str], parent_id: str | None) -> Written | None:
        entry = self._entries.get(key)
        if entry is None or parent_id is None or entry.checkpoint_id != parent_id:
            return None
        return entry

    def record(self, key: tuple[str, str, str], entry: Written) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def carry(self, key: tuple[str, str, str], parent_id: str | None, checkpoint_id: str) -> None:
        """The channel did not change at ``checkpoint_id``: its entry moves along."""
        entry = self.base_for(key, parent_id)
        if entry is not None:
            self.record(key, Written(checkpoint_id, entry.version, entry.digests, entry.depth))

    def forget_thread(self, thread_id: str) -> None:
        for key in [k for k in self._entries if k[0] == thread_id]:
            del self._entries[key]


def item_digests(serde: SerializerProtocol, items: Sequence[Any]) -> tuple[bytes, ...]:
    """One digest per item, of its serialized form."""
    out = []
    for item in items:
        kind, data = serde.dumps_typed(item)
        out.append(hashlib.blake2b(kind.encode() + b"\0" + data, digest_size=16).digest())
    return tuple(out)


def common_prefix(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def dump_list(
    serde: SerializerProtocol, value: list[Any], digests: tuple[bytes, ...], base: Written | None
) -> tuple[str, bytes, int]:
    """``(type, blob, depth)`` of a new version of a list channel: a delta on ``base`` when one
    is allowed and keeps something, else the whole list (depth 0)."""
    if base is not None and base.depth < MAX_DEPTH:
        keep = common_prefix(base.digests, digests)
        if keep:
            kind, data = serde.dumps_typed(value[keep:])
            return f"{DELTA_PREFIX}{kind}|{keep}|{base.version}", data, base.depth + 1
    kind, data = serde.dumps_typed(value)
    return kind, data, 0


def parse_delta(type_: str) -> tuple[str, int, str]:
    """``(serde type, items kept from the base, base version)`` of a delta blob's type."""
    _, kind, keep, base = type_.split("|", 3)
    return kind, int(keep), base


def load_blobs(serde: SerializerProtocol, rows: Sequence[Sequence[bytes]] | None) -> dict[str, Any]:
    """Channel values from the read's rows ``[channel, type, blob, version, is_head]``: a delta
    head is rebuilt from its chain (all the chain's rows come in the same array). A row of three
    (upstream's pre-v4 migration) is a head."""
    if not rows:
        return {}
    by_version: dict[tuple[str, str], tuple[str, bytes]] = {}
    heads: list[tuple[str, str]] = []
    for row in rows:
        # Upstream's migration of pre-v4 pending sends appends [channel, type, blob] rows.
        channel, kind, blob = row[0], row[1], row[2]
        version, head = (row[3], row[4]) if len(row) > 3 else (b"", b"t")
        key = (channel.decode(), version.decode())
        by_version[key] = (kind.decode(), blob)
        if head == b"t":
            heads.append(key)
    return {
        channel: _rebuild(serde, by_version, channel, version)
        for channel, version in heads
        if by_version[(channel, version)][0] != "empty"
    }


def _rebuild(
    serde: SerializerProtocol,
    by_version: dict[tuple[str, str], tuple[str, bytes]],
    channel: str,
    version: str,
) -> Any:
    chain: list[tuple[int, str, bytes]] = []
    kind, blob = by_version[(channel, version)]
    while kind.startswith(DELTA_PREFIX):
        inner, keep, base = parse_delta(kind)
        chain.append((keep, inner, blob))
        found = by_version.get((channel, base))
        if found is None:
            raise LookupError(f"checkpoint blob {channel}@{base} (a delta's base) is missing")
        kind, blob = found
    value = serde.loads_typed((kind, blob))
    for keep, inner, data in reversed(chain):
        value = list(value[:keep]) + list(serde.loads_typed((inner, data)))
    return value


#: The checkpoint read: upstream's ``SELECT_SQL`` with each channel's blob chain (the head version
#: and, for a delta, the versions it builds on) in ``channel_values``.
SELECT_SQL = """
select
    thread_id,
    checkpoint,
    checkpoint_ns,
    checkpoint_id,
    parent_checkpoint_id,
    metadata,
    (
        with recursive chain as (
            select bl.channel, bl.version, bl.type, bl.blob, 0 as depth
            from jsonb_each_text(checkpoint -> 'channel_versions') as cv
            inner join checkpoint_blobs bl
                on bl.thread_id = checkpoints.thread_id
                and bl.checkpoint_ns = checkpoints.checkpoint_ns
                and bl.channel = cv.key
                and bl.version = cv.value
            union all
            select bl.channel, bl.version, bl.type, bl.blob, chain.depth + 1
            from chain
            inner join checkpoint_blobs bl
                on bl.thread_id = checkpoints.thread_id
                and bl.checkpoint_ns = checkpoints.checkpoint_ns
                and bl.channel = chain.channel
                and bl.version = split_part(chain.type, '|', 4)
            where left(chain.type, 6) = 'delta|'
        )
        select array_agg(array[
            channel::bytea, type::bytea, blob, version::bytea,
            (case when depth = 0 then 't' else 'f' end)::bytea
        ])
        from chain
    ) as channel_values,
    (
        select
        array_agg(array[cw.task_id::text::bytea, cw.channel::bytea, cw.type::bytea, cw.blob, convert_to(cw.task_path, 'UTF8'), cw.idx::text::bytea])
        from checkpoint_writes cw
        where cw.thread_id = checkpoints.thread_id
            and cw.checkpoint_ns = checkpoints.checkpoint_ns
            and cw.checkpoint_id = checkpoints.checkpoint_id
    ) as pending_writes
from checkpoints """
