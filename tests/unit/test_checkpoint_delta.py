"""The messages channel's delta encoding (app/db/checkpoint_delta.py), without a database:
versions written through ``dump_list`` and read back through ``load_blobs`` give the same lists,
and a delta is only ever written where it is safe."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from app.db import checkpoint_delta as delta

SERDE = JsonPlusSerializer()
KEY = ("thread", "", "messages")


class Store:
    """Blob rows as the read's array gives them, and the lineage as the saver keeps it."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, bytes]] = {}
        self.lineage = delta.Lineage()
        self.n = 0

    def put(self, value: list[Any], parent: str | None) -> tuple[str, str]:
        """Write a version as the saver's ``aput`` does; its (checkpoint id, type)."""
        self.n += 1
        checkpoint_id, version = f"c{self.n:04}", f"v{self.n:04}"
        digests = delta.item_digests(SERDE, value)
        base = self.lineage.base_for(KEY, parent)
        kind, data, depth = delta.dump_list(SERDE, value, digests, base)
        self.rows[version] = (kind, data)
        self.lineage.record(KEY, delta.Written(checkpoint_id, version, digests, depth))
        return checkpoint_id, kind

    def read(self) -> Any:
        head = f"v{self.n:04}"
        rows = [
            [b"messages", kind.encode(), data, version.encode(), b"t" if version == head else b"f"]
            for version, (kind, data) in self.rows.items()
        ]
        return delta.load_blobs(SERDE, rows)["messages"]


def test_appends_are_deltas_and_read_back_whole() -> None:
    store = Store()
    view: list[Any] = [HumanMessage("hi", id="h0")]
    parent, kind = store.put(view, None)
    assert not kind.startswith(delta.DELTA_PREFIX)  # nothing to build on yet
    for i in range(1, 6):
        view = [*view, AIMessage(f"a{i}", id=f"a{i}")]
        parent, kind = store.put(view, parent)
        assert kind.startswith(delta.DELTA_PREFIX)
        assert store.read() == view


def test_a_message_changed_in_place_is_written_not_taken_from_the_base() -> None:
    store = Store()
    first = HumanMessage("original", id="h0")
    parent, _ = store.put([first], None)
    first.content = "edited in place"  # the same object, changed after it was stored
    view = [first, AIMessage("answer", id="a1")]
    _, kind = store.put(view, parent)
    assert not kind.startswith(delta.DELTA_PREFIX)  # nothing in common: written whole
    assert [m.content for m in store.read()] == ["edited in place", "answer"]


def test_removed_messages_keep_only_the_common_prefix() -> None:
    store = Store()
    view = [HumanMessage(f"m{i}", id=f"m{i}") for i in range(4)]
    parent, _ = store.put(view, None)
    shorter = [*view[:2], AIMessage("summary", id="s")]
    _, kind = store.put(shorter, parent)
    assert delta.parse_delta(kind)[1] == 2
    assert store.read() == shorter


def test_no_delta_on_a_parent_this_process_did_not_write() -> None:
    store = Store()
    view: list[Any] = [HumanMessage("hi", id="h0")]
    store.put(view, None)
    # Another process (or an update from an older checkpoint) wrote the parent.
    _, kind = store.put([*view, AIMessage("a", id="a")], "c-someone-else")
    assert not kind.startswith(delta.DELTA_PREFIX)


def test_a_whole_version_after_max_depth_deltas() -> None:
    store = Store()
    view: list[Any] = [HumanMessage("hi", id="h0")]
    parent, _ = store.put(view, None)
    kinds = []
    for i in range(delta.MAX_DEPTH + 1):
        view = [*view, AIMessage(f"a{i}", id=f"a{i}")]
        parent, kind = store.put(view, parent)
        kinds.append(kind.startswith(delta.DELTA_PREFIX))
    assert kinds == [True] * delta.MAX_DEPTH + [False]
    assert store.read() == view


def test_the_lineage_forgets_old_threads_and_deleted_ones() -> None:
    lineage = delta.Lineage(size=2)
    for t in ("a", "b", "c"):
        lineage.record((t, "", "messages"), delta.Written(f"{t}1", "v1", (), 0))
    assert lineage.base_for(("a", "", "messages"), "a1") is None
    assert lineage.base_for(("c", "", "messages"), "c1") is not None
    lineage.forget_thread("c")
    assert lineage.base_for(("c", "", "messages"), "c1") is None


def test_rows_of_three_are_heads_as_upstream_appends_them() -> None:
    kind, data = SERDE.dumps_typed(["send"])
    assert delta.load_blobs(SERDE, [[b"__pregel_tasks", kind.encode(), data]]) == {
        "__pregel_tasks": ["send"]
    }
