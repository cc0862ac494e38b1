"""A ``langgraph.json`` as an agents file: each of its ``graphs`` becomes an agent serving that
graph (``AgentSpec.graph``), as ``langgraph dev``, LangGraph Platform and Aegra serve the file.

Honoured: ``graphs`` (``{"id": "./path/file.py:attr"}`` or ``"package.module:attr"``, or
``{"path": ..., "description": ...}``), ``dependencies`` (folders put on the import path,
relative to the file; a package name is expected installed), ``env`` (a dotenv file relative to
the file, or a mapping; a variable already set in the environment wins, as with LangGraph's
CLI). Every other key LangGraph defines (``python_version``, ``dockerfile_lines``, ``store``,
``checkpointer``, ``auth``, ``http``, ``ui``...) means nothing here: named once at start, in
the ``langgraph_config_keys_ignored`` log line. A key LangGraph does not define is refused.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import structlog

__all__ = ["LANGGRAPH_KEYS", "is_langgraph_config", "langgraph_entries"]

log = structlog.get_logger(__name__)

#: Keys of LangGraph's configuration file (langgraph-cli's schema) that have no meaning here.
LANGGRAPH_KEYS = frozenset(
    {
        "$schema",
        "python_version",
        "node_version",
        "pip_config_file",
        "pip_installer",
        "base_image",
        "image_distro",
        "dockerfile_lines",
        "store",
        "checkpointer",
        "auth",
        "http",
        "ui",
        "ui_config",
        "keep_pkg_tools",
        "webhooks",
        "encryption",
        "api_version",
    }
)
_HONOURED = frozenset({"graphs", "dependencies", "env"})
#: The ignored keys already named (a process reads the file more than once at start).
_SAID: set[tuple[str, tuple[str, ...]]] = set()


class LangGraphConfigError(ValueError):
    """One line naming the key and the cause (raised as ``AgentsFileError`` by the caller)."""


def is_langgraph_config(raw: Any) -> bool:
    """A JSON object with ``graphs`` (and no ``agents``): LangGraph's configuration file."""
    return isinstance(raw, dict) and "graphs" in raw and "agents" not in raw


def langgraph_entries(raw: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """The agents-file entries the configuration names (one per graph, in file order), after
    putting its ``dependencies`` on the import path and loading its ``env``."""
    where = f"langgraph config {path}"
    unknown = sorted(set(raw) - _HONOURED - LANGGRAPH_KEYS)
    if unknown:
        raise LangGraphConfigError(f"{where}: field {unknown[0]!r}: not a LangGraph config key")
    ignored = sorted(set(raw) & LANGGRAPH_KEYS - {"$schema"})
    if ignored and (str(path), tuple(ignored)) not in _SAID:  # once per process and file
        _SAID.add((str(path), tuple(ignored)))
        log.warning("langgraph_config_keys_ignored", file=str(path), keys=ignored)
    _dependencies(raw.get("dependencies", []), path.parent, where)
    _environment(raw.get("env"), path.parent, where)
    graphs = raw["graphs"]
    if not isinstance(graphs, dict) or not graphs:
        raise LangGraphConfigError(f"{where}: field 'graphs': must name at least one graph")
    return [_entry(graph_id, value, where) for graph_id, value in graphs.items()]


def _entry(graph_id: str, value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, dict):
        target, description = value.get("path"), value.get("description", "")
    else:
        target, description = value, ""
    if not isinstance(target, str) or not target:
        raise LangGraphConfigError(
            f"{where}: graph {graph_id!r}: must be './file.py:attr', 'package.module:attr' or "
            "{path, description}"
        )
    entry: dict[str, Any] = {"id": graph_id, "graph": target}
    if isinstance(description, str) and description:
        entry["description"] = description
    return entry


def _dependencies(value: Any, base: Path, where: str) -> None:
    if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
        raise LangGraphConfigError(f"{where}: field 'dependencies': must be a list of paths")
    for dependency in value:
        if not dependency.startswith((".", "/")):
            continue  # a package (``langchain_openai``): installed, nothing to put on the path
        folder = (base / dependency).resolve()
        if not folder.is_dir():
            raise LangGraphConfigError(
                f"{where}: field 'dependencies': {dependency!r} is not a folder"
            )
        if str(folder) not in sys.path:
            sys.path.append(str(folder))


def _environment(value: Any, base: Path, where: str) -> None:
    if value is None:
        return
    if isinstance(value, str):
        from dotenv import dotenv_values

        file = base / value
        if not file.is_file():
            raise LangGraphConfigError(f"{where}: field 'env': {value!r} is not a file")
        values: dict[str, Any] = dict(dotenv_values(file))
    elif isinstance(value, dict):
        values = value
    else:
        raise LangGraphConfigError(f"{where}: field 'env': a dotenv path or a mapping")
    for name, setting in values.items():
        if setting is not None:
            os.environ.setdefault(str(name), str(setting))
