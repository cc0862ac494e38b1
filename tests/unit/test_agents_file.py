"""The agents file: what loads, and every misconfiguration refused at start with ONE line naming
the agent and the field (the real entry point, as a process, exits 2)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from app.agents.registry import preflight
from app.agents.spec import AgentsFileError
from app.config import load_settings
from tests.support.processes import ROOT, app_run

EXAMPLE = ROOT / "examples" / "agents.toml"


def settings_for(path: Path, **env: str) -> Any:
    return load_settings({"THREADKEEPER_AGENTS_FILE": str(path), **env})


def write(tmp_path: Path, body: Any, name: str = "agents.json") -> Path:
    path = tmp_path / name
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


def test_the_example_file_loads() -> None:
    specs = preflight(settings_for(EXAMPLE))
    assert [s.id for s in specs] == ["default", "glossary"]
    glossary = specs[1]
    assert glossary.knowledge_base == "handbook"
    assert glossary.compression.summary_threshold == 6000
    assert glossary.mcp_servers[0].command == ["python", "mcp_server.py"]


def test_factories_return_the_same_spec(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "agents": [
                {"factory": "tests.support.agent_factories:researcher"},
                {"factory": "tests.support.agent_factories:as_mapping"},
            ]
        },
    )
    specs = preflight(settings_for(path))
    assert [(s.id, s.knowledge_base) for s in specs] == [
        ("researcher", "papers"),
        ("mapped", "default"),
    ]
    assert specs[0].compression.summary_threshold == 9000


def test_imports_resolve_beside_the_agents_file(tmp_path: Path) -> None:
    """Issue 30 item 6: a Python tool or factory kept beside the agents file is found without
    PYTHONPATH (module names unique to this test: imports are cached per process)."""
    suffix = tmp_path.name.replace("-", "_")
    (tmp_path / f"helpers_{suffix}.py").write_text("GREETING = 'hello'\n")
    (tmp_path / f"tools_{suffix}.py").write_text(
        "from langchain_core.tools import tool\n"
        f"from helpers_{suffix} import GREETING\n\n\n"
        "@tool\n"
        "def greet(name: str) -> str:\n"
        '    """Greet someone."""\n'
        "    return f'{GREETING}, {name}'\n\n\n"
        "def agent():\n"
        "    return {'id': 'made', 'model': 'offline'}\n"
    )
    path = write(
        tmp_path,
        {
            "agents": [
                {**AGENT, "python_tools": [f"tools_{suffix}:greet"]},
                {"factory": f"tools_{suffix}:agent"},
            ]
        },
    )
    specs = preflight(settings_for(path))
    assert [s.id for s in specs] == ["x", "made"]
    from app.agents.spec import import_object

    greet = import_object(f"tools_{suffix}:greet", "test")
    assert greet.invoke({"name": "Ada"}) == "hello, Ada"


def test_without_a_file_one_default_agent() -> None:
    (spec,) = preflight(load_settings({}))
    assert spec.id == "default" and spec.model == "" and spec.tools is None


AGENT = {"id": "x", "model": "offline"}

#: (file body, the message's expected parts): the agent and the field, in one line.
BAD: list[tuple[str, Any, str]] = [
    ("toml-syntax", "[[agents]\nid = ", "not valid TOML"),
    ("no-agents", {"agents": []}, "field 'agents'"),
    ("unknown-field", {"agents": [{**AGENT, "modle": "offline"}]}, "agent 'x': field 'modle'"),
    ("missing-id", {"agents": [{"model": "offline"}]}, "agent #1: field 'id': required"),
    (
        "wrong-type",
        {"agents": [{**AGENT, "compression": {"summary_threshold": "lots"}}]},
        "agent 'x': field 'compression.summary_threshold'",
    ),
    (
        "zero-threshold",
        {"agents": [{**AGENT, "compression": {"summary_threshold": 0}}]},
        "agent 'x': field 'compression.summary_threshold': must be > 0",
    ),
    ("unknown-tool", {"agents": [{**AGENT, "tools": ["shell"]}]}, "agent 'x': field 'tools'"),
    (
        "web-search-unconfigured",
        {"agents": [{**AGENT, "tools": ["web_search"]}]},
        "agent 'x': field 'tools': web_search needs THREADKEEPER_WEB_SEARCH_URL",
    ),
    (
        "python-tool",
        {"agents": [{**AGENT, "python_tools": ["nowhere.module:tool"]}]},
        "agent 'x': field 'python_tools': cannot import nowhere.module",
    ),
    ("bad-model", {"agents": [{"id": "x", "model": "gpt4"}]}, "agent 'x': field 'model'"),
    (
        "unknown-provider",
        {"agents": [{"id": "x", "model": "nosuchprovider:m1"}]},
        "agent 'x': field 'model'",
    ),
    (
        "api-key-unset",
        {
            "agents": [
                {"id": "x", "model": "openai:gpt-4o-mini", "api_key_env": "TK_TEST_UNSET_KEY"}
            ]
        },
        "agent 'x': field 'api_key_env': environment variable TK_TEST_UNSET_KEY is not set",
    ),
    (
        "approval-of-absent-tool",
        {"agents": [{**AGENT, "approval_tools": ["web_search"]}]},
        "agent 'x': field 'approval_tools'",
    ),
    (
        "capability",
        {"agents": [{**AGENT, "capabilities": ["time_travel"]}]},
        "agent 'x': field 'capabilities'",
    ),
    ("duplicate-id", {"agents": [AGENT, AGENT]}, "agent 'x': field 'id': defined twice"),
    (
        "mcp-both",
        {
            "agents": [
                {**AGENT, "mcp_servers": [{"name": "m", "command": ["a"], "url": "http://h"}]}
            ]
        },
        "agent 'x': field 'mcp_servers[0]'",
    ),
    (
        "factory-bad-spec",
        {"agents": [{"factory": "tests.support.agent_factories:broken"}]},
        "field 'recursion_limit'",
    ),
]


@pytest.mark.parametrize(("body", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_each_misconfiguration_is_refused_in_one_line(
    tmp_path: Path, body: Any, expected: str
) -> None:
    name = "agents.toml" if isinstance(body, str) else "agents.json"
    path = write(tmp_path, body, name)
    with pytest.raises(AgentsFileError) as caught:
        preflight(settings_for(path))
    message = str(caught.value)
    assert expected in message and "\n" not in message, message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        b[1:]
        for b in BAD
        if b[0] in {"unknown-field", "zero-threshold", "python-tool", "api-key-unset"}
    ],
)
def test_the_entry_point_exits_2_with_one_line(tmp_path: Path, body: Any, expected: str) -> None:
    path = write(tmp_path, body)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "THREADKEEPER_AGENTS_FILE": str(path),
        # Never reached: the file is refused before any database is opened.
        "THREADKEEPER_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    }
    for command in (["serve"], ["worker"]):
        done = app_run(command, env, timeout=120)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], done.stderr
        assert lines[0].startswith("threadkeeper: ")
