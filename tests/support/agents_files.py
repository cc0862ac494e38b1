"""Agents files written for a test (``THREADKEEPER_AGENTS_FILE``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def agents_file(tmp_path: Path, *agents: dict[str, Any], name: str = "agents.json") -> str:
    """``{"agents": [...]}`` as JSON under ``tmp_path``; its path."""
    path = tmp_path / name
    path.write_text(json.dumps({"agents": list(agents)}))
    return str(path)
