"""Follower admission (app/api/followers.py): caps, places given back, shutdown."""

from __future__ import annotations

import gc

import pytest

from app.api.followers import Followers
from app.domain.errors import StreamsUnavailable, TooManyStreams


async def test_caps_and_places_given_back() -> None:
    followers = Followers(per_principal=2, total=3)
    a1, a2 = followers.admit("alice"), followers.admit("alice")
    with pytest.raises(TooManyStreams):
        followers.admit("alice")
    b1 = followers.admit("bob")  # alice's cap is hers alone
    with pytest.raises(StreamsUnavailable):
        followers.admit("carol")  # the process is full
    a1.release()
    a1.release()  # idempotent: the place is given back once
    assert followers.open_count("alice") == 1 and followers.open_count() == 2
    with followers.hold("carol"):
        assert followers.open_count("carol") == 1
    assert followers.open_count("carol") == 0
    a2.release()
    b1.release()
    assert followers.open_count() == 0


async def test_a_stream_never_started_gives_its_place_back() -> None:
    """A response whose body never ran (the client left first) drops its lease unreleased."""
    followers = Followers(per_principal=1, total=0)
    lease = followers.admit("alice")
    del lease
    gc.collect()
    assert followers.open_count() == 0
    followers.admit("alice")  # admitted again


async def test_closing_refuses_new_followers() -> None:
    followers = Followers(per_principal=0, total=0)
    followers.close()
    assert followers.closing.is_set()
    with pytest.raises(StreamsUnavailable):
        followers.admit("alice")
