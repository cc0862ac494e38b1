"""The one reader of retrieval and search results, whatever tool produced them.

Reads our own ``query_kb`` JSON, Milvus/Dify-style chunk lists (``{content, score, metadata:
{source, chunk_id, file_id, ...}}``, Dify ``{"records": [{"segment": ...}]}``) and Tavily-style
search (``{query, answer, results: [{title, url, content, score, raw_content}]}``) into one
normalised shape. The previews, the offload index and the offline extractive model all read
results through it, so a shape one of them understands is understood by all.
Pure functions: no I/O.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_ID_KEYS = ("id", "doc_id", "document_id", "chunk_id", "file_id", "segment_id", "chunk_index")
_SOURCE_KEYS = ("source", "filepath", "file_path", "document_name", "filename", "file_name")
_TITLE_KEYS = ("title", "name")
_URL_KEYS = ("url", "link", "href", "source_url")
_SCORE_KEYS = ("score", "bm25_score", "rerank_score", "relevance_score", "similarity", "distance")
_TEXT_KEYS = ("content", "text", "page_content", "snippet", "chunk", "body")
_URL = re.compile(r"https?://[^\s\"'<>)\]]+")


@dataclass(slots=True)
class ResultItem:
    """One result, normalised: every id and score found (key, value) in first-seen order."""

    ids: list[tuple[str, str]] = field(default_factory=list)
    scores: list[tuple[str, str]] = field(default_factory=list)
    source: str | None = None
    title: str | None = None
    url: str | None = None
    text: str = ""
    extra: list[str] = field(default_factory=list)

    @property
    def ident(self) -> str | None:
        """The id to cite: the first one found (a chunk's position is not an id)."""
        return next((v for k, v in self.ids if v and not k.endswith("chunk_index")), None)

    @property
    def relevance(self) -> float | None:
        """The primary score as "higher is better" (``distance`` is inverted), if numeric."""
        if not self.scores:
            return None
        key, value = self.scores[0]
        try:
            score = float(value)
        except ValueError:
            return None
        if score != score:  # NaN ranks like no score at all
            return None
        return -score if key == "distance" else score


@dataclass(slots=True)
class Results:
    items: list[ResultItem]
    query: str | None = None
    count: int | None = None
    answer: str | None = None
    shape: str = ""


def _scalar(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return json.dumps(value)
    text = str(value).strip()
    return text or None


def _first(mapping: dict[str, Any], keys: Iterable[str]) -> str | None:
    for key in keys:
        value = _scalar(mapping.get(key))
        if value is not None:
            return value
    return None


def _layers(entry: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The entry and its nested ``metadata`` / ``segment`` / ``document`` dicts, each with the
    prefix its id keys get."""
    layers: list[tuple[str, dict[str, Any]]] = [("", entry)]
    for nested in ("metadata", "segment", "doc_metadata", "document"):
        value = entry.get(nested)
        if isinstance(value, dict):
            layers.append(("document." if nested == "document" else "", value))
            inner = value.get("document")
            if nested != "document" and isinstance(inner, dict):
                layers.append(("document.", inner))
    return layers


def read_item(entry: dict[str, Any]) -> ResultItem:
    """Normalise one result/chunk, merging its nested layers."""
    layers = _layers(entry)
    item = ResultItem()
    for prefix, layer in layers:
        for key in _ID_KEYS:
            value = _scalar(layer.get(key))
            pair = (prefix + key, value or "")
            if value is not None and pair not in item.ids:
                item.ids.append(pair)
        for key in _SCORE_KEYS:
            value = _scalar(layer.get(key))
            if value is not None and all(k != key for k, _ in item.scores):
                item.scores.append((key, value))
        item.source = item.source or _first(layer, _SOURCE_KEYS)
        item.title = item.title or _first(layer, _TITLE_KEYS)
        item.url = item.url or _first(layer, _URL_KEYS)
        if not item.text:
            for key in _TEXT_KEYS:
                value = layer.get(key)
                if isinstance(value, str) and value.strip():
                    item.text = value
                    break
    for _, layer in layers:
        filepath = _scalar(layer.get("filepath"))
        if filepath and filepath != item.source:
            item.extra.append(f"filepath={filepath}")
            break
    raw = entry.get("raw_content")
    if isinstance(raw, str) and raw:
        item.extra.append(f"raw_content {len(raw)} chars")
    return item


def _looks_like_result(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    keys = set(entry)
    known = set(_TEXT_KEYS) | set(_URL_KEYS) | {"title", "metadata", "segment"}
    return bool(keys & known)


@functools.lru_cache(maxsize=16)
def read_results(text: str) -> Results | None:
    """The results of a tool output, or ``None`` when it is not a recognised result list.

    Cached per text: one offload reads it for the preview and again for the index entry
    (callers only read the result, never change it).
    """
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return None
    if isinstance(data, list):
        if data and all(_looks_like_result(e) for e in data):
            return Results(items=[read_item(e) for e in data], shape="list")
        return None
    if not isinstance(data, dict):
        return None
    for key in ("results", "records", "documents", "data", "items"):
        entries = data.get(key)
        if isinstance(entries, list) and all(_looks_like_result(e) for e in entries):
            if not entries and key != "results":
                continue
            query = data.get("query")
            if isinstance(query, dict):  # Dify: {"query": {"content": ...}}
                query = query.get("content")
            count = data.get("count", data.get("total"))
            answer = data.get("answer")
            return Results(
                items=[read_item(e) for e in entries],
                query=_scalar(query),
                count=count if isinstance(count, int) and not isinstance(count, bool) else None,
                answer=answer if isinstance(answer, str) and answer.strip() else None,
                shape=key,
            )
    return None


#: Keys of a result list's envelope that describe the search, not what it found.
_ENVELOPE_ECHO = ("query", "count", "total")


def searchable_text(text: str) -> str:
    """What of a tool output ``search_workdir`` may find: a result list's envelope without the
    query it echoes and its counters (they describe the search, not what it found: an output
    that found nothing holds nothing to recall), anything else whole."""
    parsed = read_results(text)
    if parsed is None or parsed.shape == "list":
        return text
    data = json.loads(text)
    return json.dumps(
        {k: v for k, v in data.items() if k not in _ENVELOPE_ECHO}, ensure_ascii=False
    )


def found_nothing(text: str) -> bool:
    """A result list with no result and no answer: nothing in it to recall."""
    parsed = read_results(text)
    return parsed is not None and not parsed.items and parsed.answer is None


def identity_of(entry: dict[str, Any]) -> dict[str, str]:
    """id / source / title / url / text of one result object (any shape ``read_item`` reads)."""
    item = read_item(entry)
    found = {
        "id": item.ids[0][1] if item.ids else None,
        "source": item.source,
        "title": item.title,
        "url": item.url,
        "text": item.text,
    }
    return {key: value for key, value in found.items() if value}


def result_identities(text: str) -> dict[str, list[str]]:
    """Every result id, URL and title a tool output holds, for the thread's offload index.

    Structured (retrieval/search JSON): per result, in order. Anything else: the URLs in it.
    """
    parsed = read_results(text)
    if parsed is None:
        return {"ids": [], "urls": list(dict.fromkeys(_URL.findall(text))), "titles": []}
    ids = [v for item in parsed.items for k, v in item.ids if v and not k.endswith("chunk_index")]
    return {
        "ids": list(dict.fromkeys(ids)),
        "urls": list(dict.fromkeys(item.url for item in parsed.items if item.url)),
        "titles": list(dict.fromkeys(item.title for item in parsed.items if item.title)),
    }
