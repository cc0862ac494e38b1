"""Text pieces the offline extractive model and summarizer quote: sentences, URLs, cited ids.

Shared so the model and the summarizer agree on what a sentence is and which ids a preview names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from app.compression.previews import preview_result_ids

MAX_SENTENCE_CHARS = 400
SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])\s*|\n+")
_URL = re.compile(r"https?://[^\s\"'<>)\]]+")
KB_CITE = re.compile(r"\[kb:([^\]\s]+)\]")


def sentences(text: str) -> list[str]:
    out: list[str] = []
    for raw in SENTENCE_SPLIT.split(text):
        sentence = " ".join(raw.split())
        if not sentence:
            continue
        if len(sentence) > MAX_SENTENCE_CHARS:
            sentence = sentence[: MAX_SENTENCE_CHARS - 1].rstrip() + "…"
        out.append(sentence)
    return out


def first_sentence(text: str) -> str:
    found = sentences(text)
    return found[0] if found else ""


def urls(text: str) -> list[str]:
    return [url.rstrip(".,;:!?") for url in _URL.findall(text)]


def short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def dedupe(items: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


_PREVIEW_ID = re.compile(r"""(?:\bid|"id")\s*[:=]\s*"?([A-Za-z0-9][A-Za-z0-9_.:\-]*)""")


def preview_ids(content: str) -> list[str]:
    """Result ids a preview names: the ``id`` column of a structured preview (ids are named
    once in its legend line, not per result), else ``id=`` / ``"id":`` pairs in the text."""
    column = preview_result_ids(content)
    if column is not None:
        return column
    return _PREVIEW_ID.findall(content)
