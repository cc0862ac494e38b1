"""No hand-written module in ``app/`` is over 500 lines: a module that long does too many things."""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
MAX_LINES = 500


def test_no_module_is_over_the_limit() -> None:
    counts = {
        str(path.relative_to(APP)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(APP.rglob("*.py"))
    }
    assert counts, "no modules found: the test looks in the wrong place"
    too_long = {name: lines for name, lines in counts.items() if lines > MAX_LINES}
    assert not too_long, f"split these modules (over {MAX_LINES} lines): {too_long}"
