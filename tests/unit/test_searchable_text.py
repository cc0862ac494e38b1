"""What of a tool output the recall index makes searchable (``app.compression.retrieval``)."""

from __future__ import annotations

import json

from app.compression.retrieval import found_nothing, searchable_text
from app.compression.terms import terms


def test_a_result_list_is_searchable_without_the_query_it_echoes() -> None:
    text = json.dumps(
        {
            "query": "when does the lease expire",
            "count": 1,
            "results": [{"id": "c1", "content": "Heartbeats renew it.", "score": 0.9}],
        }
    )
    found = terms(searchable_text(text))
    assert terms("Heartbeats renew it c1") <= found
    assert not found & terms("lease expire")
    assert not found_nothing(text)


def test_a_search_that_found_nothing_holds_nothing_to_recall() -> None:
    text = json.dumps({"query": "when does lease 7 expire?", "count": 0, "results": []})
    assert found_nothing(text)
    assert not terms(searchable_text(text)) & terms("when does lease 7 expire?")


def test_an_answer_beside_no_results_is_kept() -> None:
    """Tavily-style: the engine's own answer is content even when ``results`` is empty."""
    text = json.dumps({"query": "q", "answer": "Leases expire after 30 s.", "results": []})
    assert not found_nothing(text)
    assert terms("Leases expire") <= terms(searchable_text(text))


def test_other_outputs_are_searchable_whole() -> None:
    plain = "query: lease expiry is 30 s"
    listed = json.dumps([{"content": "lease expiry", "title": "query notes"}])
    assert searchable_text(plain) == plain
    assert searchable_text(listed) == listed
    assert not found_nothing(plain) and not found_nothing(listed)
