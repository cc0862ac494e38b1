"""A LangGraph graph of the user's own (``AgentSpec.graph``), loaded as LangGraph's server loads
it: ``./path/file.py:attr`` (relative to the agents file) or ``package.module:attr``, where
``attr`` is a compiled graph, an uncompiled ``StateGraph``, or a factory returning either (sync
or async; no argument, or a ``RunnableConfig``). A factory is called once, at start.

Threadkeeper attaches its PostgreSQL checkpointer (the graph's own is replaced, as LangGraph's
server does). The state must have a ``messages`` channel with ``add_messages``: the full
history and the model view come from it; other keys are kept in the checkpoint as they are.

Whether the graph opts in to the compression contract (``threadkeeper.CompressionMiddleware``,
``compression_node`` or ``compressed_model_call``) is read from the graph itself
(``uses_compression``): what its nodes reach. A graph that cannot load fails alone and early
(``AgentsFileError``, one line naming the graph id and the cause; ``serve``/``worker``/``check``
exit 2).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
import types
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.message import add_messages
from langgraph.pregel import Pregel

from app.agents.spec import AgentsFileError, AgentSpec, importable_from
from app.compression import middleware as compression_middleware

__all__ = ["LoadedGraph", "load_graph", "load_graph_blocking", "output_keys", "uses_compression"]

#: The names of the public import through which a graph opts in to compression.
_PUBLIC_NAMES = frozenset({"compressed_model_call", "compression_node", "CompressionMiddleware"})
_PUBLIC_MODULES = frozenset({"threadkeeper", compression_middleware.__name__})
#: How far the opt-in scan looks (objects visited): far beyond any graph's nodes.
_SCAN_LIMIT = 50_000


@dataclass(frozen=True, slots=True)
class LoadedGraph:
    graph: Any
    #: The graph calls its model through Threadkeeper's compression.
    opted_in: bool


def _fail(spec: AgentSpec, why: str) -> AgentsFileError:
    return AgentsFileError(f"graph {spec.id!r} ({spec.graph}): {why}")


def _import_target(spec: AgentSpec, base: Path | None) -> Any:
    location, _, attribute = spec.graph.rpartition(":")
    if location.endswith(".py"):
        module = _import_file(spec, (base or Path.cwd()) / location)
    else:
        try:
            module = importlib.import_module(location)
        except Exception as exc:  # any import-time failure is the graph's
            raise _fail(spec, f"cannot import {location} ({type(exc).__name__}: {exc})") from exc
    obj: Any = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise _fail(spec, f"{location} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    return obj


def _import_file(spec: AgentSpec, path: Path) -> types.ModuleType:
    path = path.resolve()
    if not path.is_file():
        raise _fail(spec, f"no file {path}")
    importable_from(path.parent)  # the file's siblings import as they do under langgraph dev
    # Named by its path; each load executes the file afresh (as a restarted server would: what
    # it read from the environment at import is read again).
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    stem = re.sub(r"\W", "_", path.stem)
    name = f"threadkeeper_graphs.{stem}_{digest}"
    found = importlib.util.spec_from_file_location(name, path)
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    try:
        found.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise _fail(spec, f"cannot import {path.name} ({type(exc).__name__}: {exc})") from exc
    return module


async def _materialize(spec: AgentSpec, obj: Any) -> Any:
    """A compiled graph from what ``attr`` is (calling a factory once)."""
    if isinstance(obj, Pregel):
        return obj
    if isinstance(obj, StateGraph):
        return _compile(spec, obj)
    if not callable(obj):
        raise _fail(spec, f"not a graph: a {type(obj).__name__}")
    try:
        takes_config = _takes_argument(obj)
        made = obj({"configurable": {}}) if takes_config else obj()
        if inspect.isawaitable(made):
            made = await made
    except AgentsFileError:
        raise
    except Exception as exc:
        raise _fail(spec, f"the factory raised {type(exc).__name__}: {exc}") from exc
    if isinstance(made, StateGraph):
        return _compile(spec, made)
    if not isinstance(made, Pregel):
        raise _fail(spec, f"the factory returned {type(made).__name__}, not a graph")
    return made


def _takes_argument(factory: Any) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(required) == 1


def _compile(spec: AgentSpec, builder: StateGraph[Any]) -> Any:
    try:
        return builder.compile()
    except Exception as exc:
        raise _fail(spec, f"the StateGraph does not compile ({type(exc).__name__}: {exc})") from exc


def _check_messages(spec: AgentSpec, graph: Any) -> None:
    channel = getattr(graph, "channels", {}).get("messages")
    if not isinstance(channel, BinaryOperatorAggregate) or channel.operator is not add_messages:
        raise _fail(
            spec,
            "its state has no 'messages' channel with the add_messages reducer "
            "(use MessagesState, or messages: Annotated[list, add_messages])",
        )


async def load_graph(
    spec: AgentSpec, base: Path | None, checkpointer: BaseCheckpointSaver[Any] | None
) -> LoadedGraph:
    """The agent's graph, checked, with ``checkpointer`` attached; ``AgentsFileError``."""
    graph = await _materialize(spec, _import_target(spec, base))
    _check_messages(spec, graph)
    opted_in = uses_compression(graph)
    if checkpointer is not None or graph.checkpointer is not None:
        graph = graph.copy(update={"checkpointer": checkpointer})
    return LoadedGraph(graph=graph, opted_in=opted_in)


def output_keys(graph: Any) -> frozenset[str] | None:
    """The state keys a run of ``graph`` returns (its output schema's properties); None when
    the schema names none (then every key)."""
    try:
        properties = graph.get_output_jsonschema().get("properties")
    except Exception:  # a schema LangGraph cannot render: return every key
        return None
    return frozenset(properties) if properties else None


def load_graph_blocking(spec: AgentSpec, base: Path | None) -> LoadedGraph:
    """``load_graph`` from synchronous code (``preflight``), an async factory included: on a
    loop of its own in a thread, so it works whether or not the caller's loop runs."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, load_graph(spec, base, None)).result()


# --- does the graph opt in? -------------------------------------------------------------------
def uses_compression(graph: Any) -> bool:
    """Whether a node of ``graph`` reaches Threadkeeper's compression: a
    ``CompressionMiddleware`` instance, the ``compression_node`` node, or code calling
    ``compressed_model_call`` (by name, or as ``threadkeeper.compressed_model_call``).

    A bounded walk of what the nodes hold (runnables, bound methods, closures, defaults and
    the globals their code names); modules and classes are not walked into."""
    queue: deque[Any] = deque(node for node in getattr(graph, "nodes", {}).values())
    seen: set[int] = set()
    while queue and len(seen) < _SCAN_LIMIT:
        obj = queue.popleft()
        if id(obj) in seen or isinstance(obj, str | bytes | int | float | type | types.ModuleType):
            continue
        seen.add(id(obj))
        if isinstance(obj, compression_middleware.ThreadkeeperCompression):
            return True
        if isinstance(obj, types.FunctionType):
            if _is_public_function(obj) or _names_public(obj):
                return True
            queue.extend(_function_parts(obj))
        elif isinstance(obj, types.MethodType):
            queue.extend((obj.__func__, obj.__self__))
        elif isinstance(obj, dict):
            queue.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            queue.extend(obj)
        elif hasattr(obj, "__dict__"):
            queue.extend(vars(obj).values())
    return False


def _is_public_function(fn: types.FunctionType) -> bool:
    return fn is compression_middleware.compressed_model_call or (
        fn.__module__ == compression_middleware.__name__
        and fn.__qualname__.startswith("compression_node.")
    )


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _names_public(fn: types.FunctionType) -> bool:
    """Code that calls ``threadkeeper.compressed_model_call`` (the module, then the name)."""
    names = _code_names(fn.__code__)
    if not names & _PUBLIC_NAMES:
        return False
    return any(
        isinstance(value, types.ModuleType) and value.__name__ in _PUBLIC_MODULES
        for value in (fn.__globals__.get(name) for name in names)
    )


def _function_parts(fn: types.FunctionType) -> list[Any]:
    parts: list[Any] = [cell.cell_contents for cell in fn.__closure__ or () if _filled(cell)]
    parts.extend(fn.__defaults__ or ())
    parts.extend(v for n in _code_names(fn.__code__) if (v := fn.__globals__.get(n)) is not None)
    wrapped = getattr(fn, "__wrapped__", None)
    if wrapped is not None:
        parts.append(wrapped)
    return parts


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True
