"""Stored run-event rows are served whole: every field present, older rows included."""

from __future__ import annotations

import uuid

import msgspec

from app.db.run_events import (
    MessageAddedEvent,
    StatusEvent,
    event_row,
    served_event,
)


def test_an_old_status_row_is_served_with_every_field() -> None:
    # Rows written before every field was stored held only what was set.
    served = served_event("status", {"status": "running"})
    assert msgspec.to_builtins(served) == {
        "type": "status",
        "status": "running",
        "final": False,
        "error": None,
        "error_code": None,
        "provider_status": None,
        "provider_code": None,
        "interrupt": None,
        "interrupt_value": None,
        "request_id": None,
        "handoff": False,
    }


def test_an_old_message_row_drops_its_content_copy() -> None:
    mid = uuid.uuid4()
    old = {"message_id": str(mid), "seq": 3, "role": "tool", "content": "x" * 100, "tool_name": "t"}
    served = served_event("message", old)
    assert served == MessageAddedEvent(type="message", message_id=mid, seq=3, role="tool")


def test_a_new_row_round_trips() -> None:
    event = StatusEvent(type="status", status="interrupted")
    kind, data = event_row(event)
    assert kind == "status" and served_event(kind, data) == event
