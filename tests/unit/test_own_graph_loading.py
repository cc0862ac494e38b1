"""A graph of the user's own (issue 33 items 1, 2, 5): a ``langgraph.json`` or ``graph = ...``
in the agents file; what ``attr`` may be (compiled, uncompiled, sync/async factory with or
without a config); Threadkeeper's checkpointer replacing the graph's own; the opt-in to
compression read from the graph; every bad graph refused in one line naming its id and cause
(the real entry points, as processes, exit 2)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from structlog.testing import CapturingLogger

from app.agents import langgraph_config
from app.agents.assembly import preflight
from app.agents.models import provider_models
from app.agents.own_graph import load_graph, output_keys
from app.agents.spec import AgentsFileError, load_agent_specs
from app.config import load_settings
from tests.support.processes import ROOT, app_run

EXAMPLES = ROOT / "examples" / "graphs"

HEADER = """
from typing import Annotated, TypedDict
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import StateGraph, MessagesState, START, END
from langgraph.checkpoint.memory import InMemorySaver
from structlog.testing import CapturingLogger

from app.agents import langgraph_config

def fake():
    return GenericFakeChatModel(messages=iter([AIMessage(content="hi")]))

def echo(state):
    return {"messages": [AIMessage(content="echo")]}

def builder():
    b = StateGraph(MessagesState)
    b.add_node("echo", echo)
    b.add_edge(START, "echo")
    b.add_edge("echo", END)
    return b
"""

GOOD = {
    "compiled": "graph = builder().compile(checkpointer=InMemorySaver())",
    "uncompiled": "graph = builder()",
    "factory": "def graph():\n    return builder().compile()",
    "factory_config": "def graph(config):\n    assert 'configurable' in config\n    return builder()",
    "async_factory": "async def graph():\n    return builder().compile()",
}

BAD = [
    ("import-error", "import nowhere_to_be_found\ngraph = builder()", "cannot import graph.py"),
    ("missing-attribute", "other = builder()", "has no attribute 'graph'"),
    ("not-a-graph", "graph = 42", "not a graph: a int"),
    (
        "no-messages",
        "class S(TypedDict):\n    text: str\nb = StateGraph(S)\nb.add_node('n', lambda s: {})\n"
        "b.add_edge(START, 'n')\ngraph = b",
        "no 'messages' channel",
    ),
    ("factory-raises", "def graph():\n    raise RuntimeError('no key')", "factory raised"),
    ("factory-returns", "def graph():\n    return 'nope'", "returned str, not a graph"),
]


def write_graph(tmp_path: Path, body: str, *, config: dict[str, Any] | None = None) -> Path:
    (tmp_path / "graph.py").write_text(HEADER + "\n" + body + "\n")
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps(config or {"graphs": {"mine": "./graph.py:graph"}}))
    return path


def settings_for(path: Path) -> Any:
    return load_settings({"THREADKEEPER_AGENTS_FILE": str(path)})


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_each_kind_of_attr_loads_with_our_checkpointer(tmp_path: Path, kind: str) -> None:
    path = write_graph(tmp_path, GOOD[kind])
    [spec] = preflight(settings_for(path))
    assert (spec.id, spec.graph) == ("mine", "./graph.py:graph")
    ours = InMemorySaver()
    loaded = asyncio.run(load_graph(spec, tmp_path, ours))
    assert loaded.graph.checkpointer is ours  # a graph's own checkpointer is replaced
    assert "echo" in loaded.graph.nodes
    assert loaded.opted_in is False
    assert spec.capabilities_for(loaded.opted_in) == ()


@pytest.mark.parametrize(("body", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_graph_is_refused_in_one_line_naming_it(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = write_graph(tmp_path, body)
    with pytest.raises(AgentsFileError) as caught:
        preflight(settings_for(path))
    message = str(caught.value)
    assert message.startswith("graph 'mine' (./graph.py:graph): "), message
    assert expected in message and "\n" not in message, message


OPT_IN = {
    "middleware": (
        "import threadkeeper\n"
        "graph = create_agent(model=fake(), tools=[], "
        "middleware=[threadkeeper.CompressionMiddleware()])",
        True,
    ),
    "create-agent-without": ("graph = create_agent(model=fake(), tools=[])", False),
    "node": (
        "from threadkeeper import compression_node\n"
        "b = StateGraph(MessagesState)\nb.add_node('answer', compression_node(fake()))\n"
        "b.add_edge(START, 'answer')\ngraph = b",
        True,
    ),
    "call-by-module": (
        "import threadkeeper\n"
        "async def answer(state):\n"
        "    return {'messages': await threadkeeper.compressed_model_call(fake(), state['messages'])}\n"
        "b = StateGraph(MessagesState)\nb.add_node('answer', answer)\n"
        "b.add_edge(START, 'answer')\ngraph = b",
        True,
    ),
    "call-by-name-in-helper": (
        "from threadkeeper import compressed_model_call\n"
        "async def helper(messages):\n"
        "    return await compressed_model_call(fake(), messages)\n"
        "async def answer(state):\n"
        "    return {'messages': await helper(state['messages'])}\n"
        "b = StateGraph(MessagesState)\nb.add_node('answer', answer)\n"
        "b.add_edge(START, 'answer')\ngraph = b",
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(OPT_IN))
def test_the_opt_in_is_read_from_the_graph(tmp_path: Path, case: str) -> None:
    body, expected = OPT_IN[case]
    path = write_graph(tmp_path, body)
    [spec] = preflight(settings_for(path))
    loaded = asyncio.run(load_graph(spec, tmp_path, None))
    assert loaded.opted_in is expected
    assert spec.capabilities_for(loaded.opted_in) == (("manual_compression",) if expected else ())


def test_declaring_manual_compression_without_the_opt_in_is_refused(tmp_path: Path) -> None:
    write_graph(tmp_path, "graph = builder()")
    path = tmp_path / "agents.json"
    path.write_text(
        json.dumps(
            {
                "agents": [
                    {
                        "id": "mine",
                        "graph": "./graph.py:graph",
                        "capabilities": ["manual_compression"],
                    }
                ]
            }
        )
    )
    with pytest.raises(AgentsFileError, match="declares manual_compression but does not use"):
        preflight(settings_for(path))


def test_an_agents_file_graph_entry_keeps_budget_and_refuses_assembly_fields(
    tmp_path: Path,
) -> None:
    write_graph(tmp_path, "graph = builder()")
    entry = {"id": "mine", "graph": "./graph.py:graph", "compression": {"summary_threshold": 3000}}
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": [entry]}))
    [spec] = preflight(settings_for(path))
    assert spec.compression.summary_threshold == 3000
    for field, value in (("model", "offline"), ("tools", ["query_kb"]), ("system_prompt", "x")):
        path.write_text(json.dumps({"agents": [{**entry, field: value}]}))
        with pytest.raises(AgentsFileError) as caught:
            preflight(settings_for(path))
        assert str(caught.value) == (
            f"agent 'mine': field '{field}': not with 'graph' (the graph brings its own)"
        )


def test_langgraph_json_dependencies_env_and_ignored_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "desk_helpers_i33.py").write_text("GREETING = 'from a dependency folder'\n")
    (tmp_path / "graph.py").write_text(
        HEADER + "\nimport desk_helpers_i33\nGREETING = desk_helpers_i33.GREETING\n"
        "graph = builder()\n"
    )
    (tmp_path / "local.env").write_text("I33_FROM_DOTENV=dotenv\nI33_PRESET=from-file\n")
    monkeypatch.setenv("I33_PRESET", "from-environment")
    monkeypatch.delenv("I33_FROM_DOTENV", raising=False)
    config = {
        "dependencies": ["./lib", "langchain_openai"],
        "graphs": {"desk": {"path": "./graph.py:graph", "description": "The desk."}},
        "env": "local.env",
        "python_version": "3.11",
        "dockerfile_lines": [],
    }
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps(config))
    captured = CapturingLogger()
    monkeypatch.setattr(langgraph_config, "log", captured)
    [spec] = load_agent_specs(settings_for(path))
    load_agent_specs(settings_for(path))  # read again at start: named once
    logs = [{"event": c.args[0], **c.kwargs} for c in captured.calls]
    assert (spec.id, spec.description) == ("desk", "The desk.")
    assert os.environ["I33_FROM_DOTENV"] == "dotenv"
    assert os.environ["I33_PRESET"] == "from-environment"  # the environment wins
    ignored = [e for e in logs if e["event"] == "langgraph_config_keys_ignored"]
    assert [e["keys"] for e in ignored] == [["dockerfile_lines", "python_version"]]
    asyncio.run(load_graph(spec, tmp_path, None))  # the dependency folder imports

    path.write_text(json.dumps({**config, "graphz": {}}))
    with pytest.raises(AgentsFileError, match="field 'graphz': not a LangGraph config key"):
        load_agent_specs(settings_for(path))
    monkeypatch.delenv("I33_FROM_DOTENV")


@pytest.mark.parametrize("example", ["support_desk", "records_agent"])
def test_the_examples_load_and_opt_in(example: str) -> None:
    path = EXAMPLES / example / "langgraph.json"
    specs = preflight(settings_for(path))
    for spec in specs:
        loaded = asyncio.run(load_graph(spec, path.parent, None))
        assert loaded.opted_in, spec.id


def test_the_deep_agent_example_keeps_its_own_summarization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``create_deep_agent`` always brings its ``SummarizationMiddleware``: served without
    Threadkeeper's compression (one compression, not both), its own keys in its output."""
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    path = EXAMPLES / "deep_agent" / "langgraph.json"
    [spec] = preflight(settings_for(path))
    loaded = asyncio.run(load_graph(spec, path.parent, None))
    assert loaded.opted_in is False
    assert any("SummarizationMiddleware" in node for node in loaded.graph.nodes)
    assert {"todos", "files"} <= (output_keys(loaded.graph) or set())


@pytest.mark.slow
def test_the_entry_points_exit_2_naming_the_graph(tmp_path: Path) -> None:
    path = write_graph(tmp_path, "def graph():\n    raise RuntimeError('no key')")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "THREADKEEPER_AGENTS_FILE": str(path),
        "THREADKEEPER_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    }
    expected = "graph 'mine' (./graph.py:graph): the factory raised RuntimeError: no key"
    for command in (["serve"], ["worker"]):
        done = app_run(command, env, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == f"threadkeeper: {expected}", done.stderr
    checked = app_run(["check"], {**env, "THREADKEEPER_DB_STARTUP_TIMEOUT_SECONDS": "1"})
    assert checked.returncode == 2, checked.stdout
    assert f"problem agents: {expected}" in checked.stdout, checked.stdout
    assert "Traceback" not in checked.stdout + checked.stderr


def test_a_graph_agent_has_only_a_summarizer_to_check(tmp_path: Path) -> None:
    """``check --providers`` calls what Threadkeeper calls for a graph: its summarizer (the
    graph calls its own model)."""
    path = write_graph(tmp_path, "graph = builder()")
    settings = load_settings(
        {
            "THREADKEEPER_AGENTS_FILE": str(path),
            "THREADKEEPER_LLM_BASE_URL": "http://127.0.0.1:9/v1",
        }
    )
    [spec] = preflight(settings)
    assert set(provider_models(spec, settings)) == {"summarizer"}


def test_a_package_module_graph_from_a_dependency_folder_and_an_env_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``"package.module:attr"`` (imported from a ``dependencies`` folder, as LangGraph's
    server imports it) and ``env`` as a mapping."""
    package = tmp_path / "src" / "desk_pkg_i33"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "graphs.py").write_text(
        HEADER + "\nimport os\nMODEL = os.environ['I33_MAPPED']\ngraph = builder()\n"
    )
    monkeypatch.delenv("I33_MAPPED", raising=False)
    config = {
        "dependencies": ["./src"],
        "graphs": {"pkg": "desk_pkg_i33.graphs:graph"},
        "env": {"I33_MAPPED": "from-the-mapping"},
    }
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps(config))
    [spec] = preflight(settings_for(path))
    assert (spec.id, spec.graph) == ("pkg", "desk_pkg_i33.graphs:graph")
    assert os.environ["I33_MAPPED"] == "from-the-mapping"
    loaded = asyncio.run(load_graph(spec, tmp_path, InMemorySaver()))
    assert "echo" in loaded.graph.nodes and loaded.opted_in is False
    import desk_pkg_i33.graphs  # type: ignore[import-not-found]

    assert desk_pkg_i33.graphs.MODEL == "from-the-mapping"
    monkeypatch.delenv("I33_MAPPED")
