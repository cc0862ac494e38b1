"""The worker freezes its startup heap, so full garbage collections skip it."""

from __future__ import annotations

import gc

from app.__main__ import freeze_startup_heap


def test_the_startup_heap_is_frozen_and_collections_skip_it() -> None:
    before = len(gc.get_objects())
    try:
        frozen = freeze_startup_heap()
        assert frozen >= before // 2  # the heap allocated so far (tests' own objects included)
        assert len(gc.get_objects()) < before // 10  # what a full collection still walks
        fresh = [[i] for i in range(1000)]  # allocated later: still collected as usual
        assert len(gc.get_objects()) >= len(fresh)
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
