"""Total recall of offloaded tool results: the index entry of each original and full-text search.

Why: a summary can only name so much. Every original the summary middleware offloads gets an
entry in the thread's index, with its terms (of a result list: not the query it echoes, see
``searchable_text``), once, when it is written (see
``Workdir.write_tool_result``; the model sees the index as ``index.jsonl``), and
``search_workdir`` finds text in any of them, however long ago it was summarized away, returning
paths and character offsets that ``read_workdir_file`` follows. A search asks the index which
originals hold the query's terms and reads only those. Only the Workdir's public methods are
used, so the storage behind it can change.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from app.compression.retrieval import found_nothing, identity_of, result_identities
from app.compression.terms import terms
from app.compression.workdir import Workdir, WorkdirError, WorkdirIntegrityError, WorkdirPathError

log = structlog.get_logger(__name__)

#: Longest ``args`` JSON kept verbatim in an index entry.
MAX_ARGS_CHARS = 2_000
DEFAULT_SNIPPET_CHARS = 320
#: Originals read per hit asked for: the index ranks by query terms held anywhere in an
#: original, the passage scorer by terms held close together, so it gets a few to choose from.
CANDIDATES_PER_HIT = 3
MAX_CANDIDATES = 60


def index_fields(tool: str, args: dict[str, Any], text: str) -> dict[str, Any]:
    """The index entry of one offloaded result, beyond path / sha256 / chars (Workdir's part)."""
    rendered = json.dumps(args, ensure_ascii=False, sort_keys=True)
    return {
        "tool": tool,
        "args": args if len(rendered) <= MAX_ARGS_CHARS else rendered[:MAX_ARGS_CHARS] + "...",
        **result_identities(text),
    }


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One passage of an offloaded original: ``text[offset:end]`` of the file at ``path``."""

    path: str
    tool: str
    offset: int
    end: int
    snippet: str
    matched: list[str]
    sha256: str
    #: id / source / title / url of the result object the match sits in (JSON results).
    result: dict[str, str] | None = None
    #: The matching part of that result's own text (no JSON quoting), when there is one.
    passage: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


async def search_workdir(
    workdir: Workdir,
    thread_id: str,
    query: str,
    *,
    limit: int = 5,
    snippet_chars: int = DEFAULT_SNIPPET_CHARS,
) -> list[SearchHit]:
    """Best passage per indexed original, best first: the exact query (case-insensitive) beats
    the most distinct query terms within ``snippet_chars``; ties go to the index's order (more
    terms held overall, then the newer original).

    Cost O(matches): the thread's index names the originals holding the query's terms (a
    query without a content term finds nothing); only those, at most ``CANDIDATES_PER_HIT``
    per hit asked for, are read, each verified against its SHA-256 as it is read.
    """
    needle = " ".join(query.split())
    words = sorted(terms(needle), key=len, reverse=True)
    if not words:
        return []
    limit = max(1, limit)
    wanted = min(MAX_CANDIDATES, limit * CANDIDATES_PER_HIT)
    scored: list[tuple[tuple[int, int, int], SearchHit]] = []
    for rank, (entry, _) in enumerate(await workdir.candidates(thread_id, words, wanted)):
        hit = await _hit(workdir, thread_id, entry, needle, words, snippet_chars)
        if hit is not None:
            scored.append(((hit[0][0], hit[0][1], -rank), hit[1]))
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return [hit for _, hit in scored[:limit]]


async def _hit(
    workdir: Workdir,
    thread_id: str,
    entry: dict[str, object],
    needle: str,
    words: list[str],
    snippet_chars: int,
) -> tuple[tuple[int, int], SearchHit] | None:
    """The best passage of one indexed original, read (and verified) now; None if none."""
    path = str(entry["path"])
    try:
        text, _, sha = await workdir.read_text(thread_id, path)
    except WorkdirIntegrityError:
        log.warning("workdir_original_tampered", thread_id=thread_id, path=path)
        return None  # never served as the original
    except (WorkdirError, WorkdirPathError):
        return None  # an original that cannot be read is not a hit
    if found_nothing(text):
        # Only its query matched: the index no longer holds such terms (``searchable_text``),
        # but an entry written before that still may.
        return None
    found = _best_passage(text, needle, words, snippet_chars)
    if found is None:
        return None
    score, start, end, matched, at = found
    result = _enclosing_result(text, at)
    passage = None
    body = result.pop("text", "") if result is not None else ""
    inner = _best_passage(body, needle, words, snippet_chars) if body else None
    if inner is not None:
        passage = body[inner[1] : inner[2]]
    hit = SearchHit(
        path=path,
        tool=str(entry.get("tool") or ""),
        offset=start,
        end=end,
        snippet=text[start:end],
        matched=matched,
        sha256=sha,
        result=result or None,
        passage=passage,
    )
    return score, hit


def _best_passage(
    text: str, needle: str, words: list[str], width: int
) -> tuple[tuple[int, int], int, int, list[str], int] | None:
    """(score, start, end, matched terms, first match) of the best ``width``-char window."""
    phrase = re.compile(re.escape(needle).replace(r"\ ", r"\s+"), re.IGNORECASE)
    exact = phrase.search(text)
    if exact is not None:
        start, end = _window(text, exact.start(), exact.end(), width)
        return (1, len(words)), start, end, [needle], exact.start()
    hits = sorted(
        (m.start(), m.end(), word)
        for word in words
        for m in re.finditer(re.escape(word), text, re.IGNORECASE)
    )
    if not hits:
        return None
    best: tuple[int, int, int] | None = None  # (distinct terms, first hit, last hit)
    left = 0
    for right in range(len(hits)):
        while hits[right][1] - hits[left][0] > width:
            left += 1
        distinct = len({h[2] for h in hits[left : right + 1]})
        if best is None or distinct > best[0]:
            best = (distinct, left, right)
    assert best is not None
    distinct, first, last = best
    matched = sorted({h[2] for h in hits[first : last + 1]})
    start, end = _window(text, hits[first][0], hits[last][1], width)
    return (0, distinct), start, end, matched, hits[first][0]


def _window(text: str, start: int, end: int, width: int) -> tuple[int, int]:
    """``width`` characters around ``text[start:end]`` (more if the match itself is longer)."""
    pad = max(0, (width - (end - start)) // 2)
    lo = max(0, start - pad)
    hi = min(len(text), max(end, lo + width))
    return lo, hi


#: What ``_enclosing_result`` looks at: a whole JSON string (skipped in one step, escapes
#: included; one left open runs to the end), or a brace outside of strings.
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[{}]', re.S)


def _enclosing_result(text: str, position: int) -> dict[str, str] | None:
    """Identity of the innermost JSON object around ``position`` that names a result."""
    if text.lstrip()[:1] not in ("[", "{"):
        return None
    stack: list[int] = []
    for token in _STRUCTURE.finditer(text):
        char = token.group()
        if char == "{":
            stack.append(token.start())
        elif char == "}" and stack:
            start = stack.pop()
            index = token.start()
            if start <= position <= index:
                try:
                    value = json.loads(text[start : index + 1])
                except ValueError:
                    return None
                identity = identity_of(value) if isinstance(value, dict) else {}
                if identity:
                    return identity
    return None
