"""A Python tool for the example agents file (``python_tools = ["examples.tools:word_count"]``,
importable when Threadkeeper runs from the repository root; see README "Agents")."""

from __future__ import annotations

from langchain_core.tools import tool


@tool
def word_count(text: str) -> str:
    """Count the words of a text."""
    return f"{len(text.split())} words"
