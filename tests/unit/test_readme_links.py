"""The README is the ten-minute page: its relative links (to docs/ pages, folders and files) must
point at something in the repository. The docs themselves are checked by ``mkdocs build --strict``
in scripts/test.sh."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_in_the_readme_exists() -> None:
    # Links leaving the repository (the design record in ../shared/) are not the clone's to check.
    targets = [
        t
        for t in LINK.findall((ROOT / "README.md").read_text())
        if "://" not in t and not t.startswith("../")
    ]
    assert any(t.startswith("docs/") for t in targets)
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []


def test_every_docs_page_is_linked_from_the_readme_or_the_docs_index() -> None:
    readme = (ROOT / "README.md").read_text()
    index = (ROOT / "docs" / "index.md").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md")
    unlinked = [p for p in pages if f"docs/{p}" not in readme and f"({p})" not in index]
    assert unlinked == []
