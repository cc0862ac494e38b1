"""Checkpoint storage encoding: short channel versions that order like numbers."""

from __future__ import annotations

import random

from langgraph.checkpoint.postgres.base import BasePostgresSaver

from app.db.checkpoint_codec import next_version


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
