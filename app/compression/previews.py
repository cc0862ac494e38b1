"""Model-visible previews that replace large tool results after they were offloaded.

A preview must let the model keep working without the full text: it names the file, its size
and SHA-256 and how to read it back, and, for retrieval/search results, it keeps every result's
identity (ids, source, title, URL, scores) in the original order; only the per-result text
snippets shrink to fit the budget. Pure functions: no I/O, easy to test.
"""

from __future__ import annotations

import json
import re

from app.compression.retrieval import ResultItem, read_results
from app.compression.tool_names import RETRIEVAL_TOOLS
from app.compression.workdir import OffloadRecord

#: Characters suggested per ``read_workdir_file`` call in the header.
READ_CHUNK_CHARS = 20_000

_MAX_TITLE_CHARS = 300
_MIN_SNIPPET_CHARS = 60
_MAX_SNIPPET_CHARS = 1_200
#: Characters a snippet line costs beyond its text: indent, newline, "... (+N chars)".
_SNIPPET_OVERHEAD = 24
_WS = re.compile(r"\s+")
_DECODER = json.JSONDecoder()


def preview_header(record: OffloadRecord, *, tool_name: str | None = None) -> str:
    """Where the full text lives, how big it is, its digest and how to read it back."""
    who = f"{tool_name} result" if tool_name else "Tool result"
    limit = min(READ_CHUNK_CHARS, record.chars) if record.chars else READ_CHUNK_CHARS
    # Token-lean (a preview is fresh input on every later request): the path once, the byte
    # size only when it differs from the character count.
    size = f"{record.chars} chars"
    if record.bytes != record.chars:
        size += f", {record.bytes} bytes"
    return (
        f"[{who} offloaded to {record.path} ({size}, sha256 {record.sha256}); read it with "
        f"read_workdir_file(path, offset=0, limit={limit}), offset and limit in chars]"
    )


# --- generic ------------------------------------------------------------------------------------
def generic_preview(text: str, record: OffloadRecord, budget_chars: int) -> str:
    """Head / middle / tail slices of ``text`` with the omitted character counts stated."""
    header = preview_header(record)
    body_budget = max(budget_chars - len(header) - 200, 300)
    total = len(text)
    if total <= body_budget:
        return f"{header}\n{text}"
    head_n = int(body_budget * 0.45)
    mid_n = int(body_budget * 0.20)
    tail_n = body_budget - head_n - mid_n
    mid_start = max(head_n, total // 2 - mid_n // 2)
    mid_end = min(mid_start + mid_n, total - tail_n)
    tail_start = total - tail_n
    gap1 = mid_start - head_n
    gap2 = tail_start - mid_end
    return (
        f"{header}\n"
        f"--- head (chars 0-{head_n}) ---\n{text[:head_n]}\n"
        f"[... {gap1} chars omitted ...]\n"
        f"--- middle (chars {mid_start}-{mid_end}) ---\n{text[mid_start:mid_end]}\n"
        f"[... {gap2} chars omitted ...]\n"
        f"--- tail (chars {tail_start}-{total}) ---\n{text[tail_start:]}"
    )


# --- structured -----------------------------------------------------------------------------
def _clip(text: str, limit: int) -> str:
    flat = _WS.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    if limit <= 0:
        return ""
    return f"{flat[:limit].rstrip()}... (+{len(flat) - limit} chars)"


def _columns(items: list[ResultItem]) -> tuple[list[str], list[str]]:
    """The id and score keys of a result list, in first-seen order: named once in the legend
    line instead of on every result line."""
    id_keys = list(dict.fromkeys(k for item in items for k, _ in item.ids))
    score_keys = list(dict.fromkeys(k for item in items for k, _ in item.scores))
    return id_keys, score_keys


def _quoted_if_ambiguous(value: str, *, space_separated: bool) -> str:
    """``value`` verbatim unless it could be misread, then JSON-quoted: empty or padded, ``-``
    (reads as absent), starting with a quote, holding ``|`` or a line break, or, in the
    space-separated id/score cells, any whitespace."""
    flat = value.strip()
    if (
        not flat
        or flat != value
        or flat == "-"
        or flat.startswith('"')
        or "|" in flat
        or "\n" in flat
        or "\r" in flat
        or (space_separated and any(c.isspace() for c in flat))
    ):
        return json.dumps(value, ensure_ascii=False)
    return value


def _cell(value: str | None) -> str:
    """An id/score cell: ``-`` when absent."""
    return _quoted_if_ambiguous(value, space_separated=True) if value else "-"


def _column(value: str) -> str:
    """A ``|``-separated column (source, title)."""
    return _quoted_if_ambiguous(value, space_separated=False)


def _meta_line(item: ResultItem, id_keys: list[str], score_keys: list[str]) -> str:
    """One line per result, token-lean (each preview is fresh input on every later request):
    the id and score values in the legend's column order (``-`` when a result lacks one), then
    ``| source | title | url`` by position (``-`` when absent; a value that could be misread as
    a separator or as absent is JSON-quoted), then extras."""
    ids, scores = dict(item.ids), dict(item.scores)
    values = [_cell(ids.get(k)) for k in id_keys] + [_cell(scores.get(k)) for k in score_keys]
    title = _column(item.title[:_MAX_TITLE_CHARS]) if item.title else None
    columns = [_column(item.source) if item.source else "-", title or "-", item.url or "-"]
    line = " ".join(values) + " | " + " | ".join(columns) if values else " | ".join(columns)
    return " ".join([line, *item.extra])


#: Start of the legend line of a structured preview (``preview_result_ids`` reads it back).
LEGEND = "in order, one result per line: "


def legend(id_keys: list[str], score_keys: list[str]) -> str:
    keyed = " ".join([*id_keys, *score_keys])
    return LEGEND + (f"{keyed} | " if keyed else "") + "source | title | url"


def structured_preview(
    tool_name: str, text: str, record: OffloadRecord, budget_chars: int
) -> str | None:
    """Preview for retrieval/search JSON; ``None`` if the text is not a recognised shape."""
    parsed = read_results(text)
    if parsed is None:
        return None
    items = parsed.items
    header = preview_header(record, tool_name=tool_name)
    lines = [header]
    summary = f"{len(items)} results"
    if parsed.count is not None and parsed.count != len(items):
        summary += f" (reported count {parsed.count})"
    if parsed.query:
        summary += f" for query {json.dumps(_clip(parsed.query, 300), ensure_ascii=False)}"
    id_keys, score_keys = _columns(items)
    lines.append(f"{summary}; {legend(id_keys, score_keys)}")
    meta = [_meta_line(item, id_keys, score_keys) for item in items]
    fixed = sum(len(line) + 1 for line in lines) + sum(len(m) + 1 for m in meta)
    remaining = max(budget_chars - fixed, 0)
    if parsed.answer:
        answer_budget = min(len(parsed.answer), max(remaining // 4, 200))
        lines.append(f"answer: {_clip(parsed.answer, answer_budget)}")
        remaining = max(remaining - answer_budget - 10, 0)
    budgets = snippet_budgets(items, remaining)
    for meta_line, item, chars in zip(meta, items, budgets, strict=True):
        lines.append(meta_line)
        if chars:
            lines.append(f"    > {_clip(item.text, chars)}")
    return "\n".join(lines)


def snippet_budgets(items: list[ResultItem], remaining: int) -> list[int]:
    """Characters of text snippet per item (0: metadata only), in the items' order.

    Splitting the budget evenly over every result dropped all snippets once each share fell
    under ``_MIN_SNIPPET_CHARS`` (the default settings with 8 knowledge-base hits). Instead, as
    many results as the budget allows get a snippet of at least that size, best-scored first
    (items without a numeric score after scored ones, in their order); short texts take only what
    they need and leave the rest to the others; no snippet exceeds ``_MAX_SNIPPET_CHARS``.
    """
    budgets = [0] * len(items)
    with_text = [i for i, item in enumerate(items) if item.text]
    room = _MIN_SNIPPET_CHARS + _SNIPPET_OVERHEAD
    fit = min(len(with_text), max(remaining, 0) // room)
    if fit == 0:
        return budgets

    def rank(index: int) -> tuple[int, float, int]:
        relevance = items[index].relevance
        return (relevance is None, -(relevance or 0.0), index)

    chosen = sorted(with_text, key=rank)[:fit]
    lengths = {i: len(_WS.sub(" ", items[i].text).strip()) for i in chosen}
    left = remaining
    # Shortest first, so what a short text leaves unused is shared among the longer ones.
    for position, index in enumerate(sorted(chosen, key=lambda i: (lengths[i], i))):
        share = left // (fit - position) - _SNIPPET_OVERHEAD
        budgets[index] = max(min(lengths[index], share, _MAX_SNIPPET_CHARS), 0)
        left -= budgets[index] + _SNIPPET_OVERHEAD
    return budgets


def _cells(row: str) -> list[str | None]:
    """The id/score cells of a result line (space separated, JSON-quoted when needed; None
    for an absent value)."""
    cells: list[str | None] = []
    rest = row.strip()
    while rest and not rest.startswith("|"):
        if rest.startswith('"'):
            try:
                value, end = _DECODER.raw_decode(rest)
            except ValueError:
                return cells
            cells.append(str(value))
            rest = rest[end:].lstrip()
            continue
        head, _, rest = rest.partition(" ")
        cells.append(None if head == "-" else head)
        rest = rest.lstrip()
    return cells


def preview_result_ids(text: str, key: str = "id") -> list[str] | None:
    """The ``key`` column of every result line of a structured preview, in order (``[]`` when
    the results have no such key); ``None`` when ``text`` has no legend line."""
    lines = text.splitlines()
    for position, line in enumerate(lines):
        start = line.find(LEGEND)
        if start < 0:
            continue
        keys = line[start + len(LEGEND) :].split(" | ")[0].split()
        if key not in keys or keys[0] == "source":
            return []
        column = keys.index(key)
        ids: list[str] = []
        for row in lines[position + 1 :]:
            if row.startswith(" ") or " | " not in row:
                continue  # a snippet line
            cells = _cells(row)
            value = cells[column] if column < len(cells) else None
            if value is not None:
                ids.append(value)
        return ids
    return None


def build_preview(
    tool_name: str | None, text: str, record: OffloadRecord, budget_chars: int
) -> str:
    """Structured preview when the tool output is a recognised result list, else generic."""
    name = tool_name or ""
    if name in RETRIEVAL_TOOLS or text.lstrip()[:1] in ("[", "{"):
        preview = structured_preview(name or "tool", text, record, budget_chars)
        if preview is not None:
            return preview
    return generic_preview(text, record, budget_chars)
