"""Query/content terms shared by the extractive model's ranking and ``search_workdir``.

Why one place: the offline model decides what is relevant with the same notion of a "term" that
the workdir search matches on, so a question the model can rank is a question search can find.
"""

from __future__ import annotations

import itertools
import re

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_STOPWORD_TEXT = """
a an and are as at be by can could did do does for from had has have how i if in into is it its
me my of on or our please so that the their them then there these this to was we what when where
which who why will with would you your about tell show give find know
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def terms(text: str) -> set[str]:
    """Lower-cased content words; CJK runs contribute character bigrams (no spaces there).

    Every term is a substring of the lower-cased text it came from (plurals fold by dropping
    the final "s"), so terms can also be searched for as plain substrings.
    """
    found: set[str] = set()
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            chars = [c for c in word if _CJK.match(c)]
            found.update(a + b for a, b in itertools.pairwise(chars))
            found.update(chars if len(chars) == 1 else [])
            latin = _CJK.sub(" ", word).split()
            found.update(w for w in latin if len(w) > 1 and w not in STOPWORDS)
        elif len(word) > 1 and word not in STOPWORDS:
            found.add(stem(word))
    return found


def stem(word: str) -> str:
    """Crude plural folding ("leases" ~ "lease"): enough for term overlap, and deterministic."""
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word
