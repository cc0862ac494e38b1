"""Test helpers live in one place, ``tests/support/`` (issue 31 item 6).

A test module never imports another test module or ``tests/conftest.py`` (pytest loads those
itself; importing one runs it a second time under another name, fixtures and all), not even in
the source of a child process it starts; and ``tests/support`` imports nothing else of
``tests``. A helper two tests share moves to ``tests/support``.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
#: ``from tests.x import ...`` / ``import tests.x``, in code or in a child process's source.
_IMPORT = re.compile(r"^\s*(?:from|import)\s+(tests(?:\.\w+)*)", re.MULTILINE)
_SKIPPED = {"node_modules", "__pycache__", "artifacts"}


def _modules() -> list[Path]:
    return [p for p in TESTS.rglob("*.py") if not _SKIPPED & set(p.relative_to(TESTS).parts)]


def _imports(path: Path) -> list[str]:
    return _IMPORT.findall(path.read_text(encoding="utf-8"))


def test_tests_import_helpers_only_from_tests_support() -> None:
    modules = _modules()
    assert len(modules) > 100, "the scan found too few modules: update the test"
    wrong = [
        f"{path.relative_to(TESTS)} imports {name}"
        for path in modules
        for name in _imports(path)
        if name != "tests.support" and not name.startswith("tests.support.")
    ]
    assert wrong == [], "helpers belong in tests/support/:\n" + "\n".join(wrong)


def test_the_scan_sees_what_it_forbids() -> None:
    """The pattern finds an import of a test module, in code and in a child's source."""
    code = 'from tests.integration.test_drain import x\nCHILD = """\nimport tests.conftest\n"""'
    assert _IMPORT.findall(code) == ["tests.integration.test_drain", "tests.conftest"]
