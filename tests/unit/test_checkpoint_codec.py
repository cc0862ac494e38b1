"""Checkpoint storage encoding: short channel versions that order like numbers, compressed blobs."""

from __future__ import annotations

import hashlib
import random

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from app.db.checkpoint_codec import ZDICT_SHA256, CompressingSerializer, next_version, zdict


def test_versions_count_up_and_compare_as_strings_like_their_numbers() -> None:
    versions = [next_version(None)]
    for _ in range(12345):
        versions.append(next_version(versions[-1]))
    assert versions[:3] == ["a1", "a2", "a3"]
    assert versions[9] == "b10" and versions[99] == "c100"
    assert versions == sorted(versions)
    assert len(set(versions)) == len(versions)
    sample = random.Random(7).sample(range(1, 10**12), 2000)
    as_text = {n: next_version(n - 1) for n in sample}
    assert sorted(sample) == sorted(sample, key=as_text.__getitem__)


def test_a_thread_with_upstream_versions_keeps_counting_up() -> None:
    upstream = BasePostgresSaver.get_next_version(
        None, "00000000000000000000000000000041.0.5", None
    )  # type: ignore[arg-type]
    ours = next_version(upstream)
    assert ours == "b43"
    assert ours > upstream  # LangGraph's test: a newer version is greater
    assert next_version(41) == "b42"
    assert next_version(None) > ""  # LangGraph's null version of a str-versioned checkpoint


def test_compression_round_trips_and_leaves_small_values_alone() -> None:
    serde = CompressingSerializer()
    view = [HumanMessage("hello " * 50, id="h"), AIMessage("world", id="a")]
    kind, data = serde.dumps_typed(view)
    assert kind == "msgpack+z1"
    assert len(data) < len(JsonPlusSerializer().dumps_typed(view)[1]) / 3
    assert serde.loads_typed((kind, data)) == view
    assert serde.dumps_typed(7) == JsonPlusSerializer().dumps_typed(7)  # too small to gain
    assert serde.loads_typed(JsonPlusSerializer().dumps_typed(view)) == view  # stored before


def test_an_unknown_encoding_is_refused_and_the_dictionary_is_the_shipped_one() -> None:
    with pytest.raises(ValueError, match=r"\+z9"):
        CompressingSerializer().loads_typed(("msgpack+z9", b"\x00"))
    assert hashlib.sha256(zdict()).hexdigest() == ZDICT_SHA256
