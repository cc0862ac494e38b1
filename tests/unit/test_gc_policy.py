"""A serving process freezes its startup heap (full collections skip it), collects the young
generation less often, and counts the time its collections take."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from app.gc_policy import THRESHOLDS, serving_gc
from app.metrics import GC_SECONDS


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds, callbacks = gc.get_threshold(), list(gc.callbacks)
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    gc.callbacks[:] = callbacks


def _gc_seconds(generation: int) -> float:
    return GC_SECONDS.labels(str(generation))._value.get()


@pytest.mark.usefixtures("restored_gc")
def test_the_startup_heap_is_frozen_and_collections_skip_it() -> None:
    before = len(gc.get_objects())
    frozen = serving_gc()
    assert frozen >= before // 2  # the heap allocated so far (tests' own objects included)
    assert len(gc.get_objects()) < before // 10  # what a full collection still walks
    fresh = [[i] for i in range(1000)]  # allocated later: still collected as usual
    assert len(gc.get_objects()) >= len(fresh)
    assert gc.get_threshold() == THRESHOLDS


@pytest.mark.usefixtures("restored_gc")
def test_collection_time_is_counted_by_generation_once() -> None:
    serving_gc()
    serving_gc()  # idempotent: one clock, not two
    assert gc.callbacks.count(gc.callbacks[-1]) == 1
    before = [_gc_seconds(g) for g in range(3)]
    garbage = [[i] for i in range(50_000)]
    for item in garbage:
        item.append(item)  # a cycle each: only the collector frees them
    del garbage, item
    gc.collect(2)
    gc.collect(0)
    after = [_gc_seconds(g) for g in range(3)]
    assert after[2] > before[2]
    assert after[0] > before[0]
    assert after[1] == before[1]
