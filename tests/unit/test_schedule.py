"""The slow-first order of the suite (tests/support/schedule.py)."""

from __future__ import annotations

import pytest

from tests.support.schedule import share_sizes, slow_first


@pytest.mark.parametrize(("total", "workers"), [(10, 2), (11, 2), (7, 3), (827, 2), (2, 3)])
def test_shares_add_up_like_worksteal_splits_them(total: int, workers: int) -> None:
    sizes = share_sizes(total, workers)
    assert sum(sizes) == total
    assert max(sizes) - min(sizes) <= 1


def test_each_share_starts_with_its_slow_tests_and_nothing_is_lost() -> None:
    items = [f"s{i}" if i % 5 == 0 else f"f{i}" for i in range(23)]  # 5 slow, 18 fast
    ordered = slow_first(items, 2, lambda i: i.startswith("s"))
    assert sorted(ordered) == sorted(items)
    first, second = ordered[:11], ordered[11:]
    assert first[:3] == ["s0", "s10", "s20"] and second[:2] == ["s5", "s15"]
    fast = [i for i in ordered if i.startswith("f")]
    assert fast == [i for i in items if i.startswith("f")]  # fast ones keep their order


def test_a_full_share_passes_its_turn_to_the_next() -> None:
    items = ["s1", "s2", "s3", "s4", "f1"]  # three shares of 1, 2 and 2
    ordered = slow_first(items, 3, lambda i: i.startswith("s"))
    assert ordered == ["s1", "s2", "s4", "s3", "f1"]  # s4 skips the full first share


def test_one_worker_keeps_the_collection_order() -> None:
    items = ["f1", "s1", "f2"]
    assert slow_first(items, 1, lambda i: i.startswith("s")) == items


def test_a_modules_slow_tests_stay_together_in_one_share() -> None:
    items = ["a::s1", "a::s2", "a::s3", "b::s1", "c::s1", "c::s2"] + [f"f::f{i}" for i in range(10)]
    ordered = slow_first(items, 2, lambda i: "::s" in i, group=lambda i: i.split("::", 1)[0])
    assert sorted(ordered) == sorted(items)
    first, second = ordered[:8], ordered[8:]
    assert first[:5] == ["a::s1", "a::s2", "a::s3", "c::s1", "c::s2"]  # modules a and c
    assert second[:1] == ["b::s1"]


def test_a_group_larger_than_the_room_left_goes_on_in_the_next_share() -> None:
    items = ["a::s1", "a::s2", "a::s3", "f::f1"]  # shares of 2 and 2
    ordered = slow_first(items, 2, lambda i: "::s" in i, group=lambda i: i.split("::", 1)[0])
    assert ordered == ["a::s1", "a::s2", "a::s3", "f::f1"]
