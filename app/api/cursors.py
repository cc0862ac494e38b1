"""Opaque keyset cursors ``(created_at, id)`` of the newest-first list endpoints (ListThreads,
ListDocuments): one encoding, one refusal (400 ``validation_error``) of a cursor we did not make."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime

from app.domain.errors import ValidationFailed


def encode_cursor(created_at: datetime, row_id: uuid.UUID) -> str:
    raw = f"{created_at.isoformat()}|{row_id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, _, row_id = base64.urlsafe_b64decode(padded.encode()).decode().partition("|")
        return datetime.fromisoformat(created), uuid.UUID(row_id)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailed("invalid cursor") from exc
