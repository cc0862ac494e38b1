"""The ``values`` a server returns for a graph with state keys of its own (issue 33), through
the official ``langgraph-sdk`` only, so the same scenario runs against Threadkeeper and against
``langgraph dev`` serving the same example: each ``values`` part of ``runs.stream`` (one per
step, the first at the run's start), the result of ``runs.wait`` and of ``runs.join``, with
the graph's own keys (``model_calls``; ``route``, ``documents``, ``approved``) beside
``messages`` and ``__interrupt__`` when the run stopped; under ``updates``, each stream's
``updates`` parts (each node's own update, in order; ``tests/support/graphs/
updates_reference.json``).

A transcript keeps what both servers must agree on: each message's type, content and tool
call names (ids and metadata differ by design), every other key as it is, and an interrupt's
value."""

from __future__ import annotations

from typing import Any

from langgraph_sdk import get_client

from tests.support.openai_server import OpenAICompatibleServer


def project(values: dict[str, Any]) -> dict[str, Any]:
    """What two servers' ``values`` must agree on."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key == "messages":
            out[key] = [
                [m["type"], m["content"], [c["name"] for c in m.get("tool_calls") or []]]
                for m in value
            ]
        elif key == "__interrupt__":
            out[key] = [i["value"] for i in value]
        elif key != "threadkeeper":
            out[key] = value
    return out


def project_update(data: dict[str, Any]) -> dict[str, Any]:
    """What two servers' ``updates`` parts must agree on: each node's update projected like
    ``values`` (an interrupt: its value)."""
    out: dict[str, Any] = {}
    for node, update in data.items():
        if node == "__interrupt__":
            out[node] = [i["value"] for i in update]
        elif isinstance(update, dict):
            out[node] = project(update)
        elif isinstance(update, list):
            out[node] = [project(u) if isinstance(u, dict) else u for u in update]
        else:
            out[node] = update
    return out


async def _stream(
    out: dict[str, Any], name: str, client: Any, tid: str, graph: str, **kwargs: Any
) -> None:
    """``out[name]``: the stream's ``values`` parts; ``out["updates"][name]``: its
    ``updates`` parts (node by node, in order)."""
    parts = [
        (p.event, p.data)
        async for p in client.runs.stream(tid, graph, stream_mode=["values", "updates"], **kwargs)
    ]
    assert "error" not in [e for e, _ in parts], parts
    out[name] = [project(d) for e, d in parts if e == "values"]
    updates = [project_update(d) for e, d in parts if e == "updates"]
    out.setdefault("updates", {})[name] = updates


def _ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def records_transcript(
    url: str, api_key: str | None, provider: OpenAICompatibleServer
) -> dict[str, Any]:
    """``examples/graphs/records_agent`` (a ``create_agent`` graph, ``model_calls`` counted
    by its own middleware, ``delete_record`` behind approval)."""
    client, graph = get_client(url=url, api_key=api_key), "records"
    tid = (await client.threads.create())["thread_id"]
    out: dict[str, Any] = {}
    provider.enqueue_tool_call("lookup_record", {"record_id": "r1"})
    provider.enqueue_text("Ada.")
    await _stream(out, "stream", client, tid, graph, input=_ask("who is r1?"))
    provider.enqueue_tool_call("delete_record", {"record_id": "r2"})
    await _stream(out, "stream_interrupted", client, tid, graph, input=_ask("delete r2"))
    provider.enqueue_text("Deleted.")
    approve = {"decisions": [{"type": "approve"}]}
    await _stream(out, "stream_resumed", client, tid, graph, command={"resume": approve})
    provider.enqueue_text("Waited.")
    out["wait"] = project(await client.runs.wait(tid, graph, input=_ask("thanks")))
    provider.enqueue_tool_call("delete_record", {"record_id": "r1"})
    out["wait_interrupted"] = project(await client.runs.wait(tid, graph, input=_ask("delete r1")))
    provider.enqueue_text("Joined.")
    run = await client.runs.create(tid, graph, command={"resume": approve})
    out["join"] = project(await client.runs.join(tid, run["run_id"]))
    return out


async def desk_transcript(
    url: str, api_key: str | None, provider: OpenAICompatibleServer
) -> dict[str, Any]:
    """``examples/graphs/support_desk`` (a hand-built graph: ``route``, ``documents`` and
    ``approved`` of its own, an ``interrupt(value)`` before a refund)."""
    client, graph = get_client(url=url, api_key=api_key), "support_desk"
    tid = (await client.threads.create())["thread_id"]
    out: dict[str, Any] = {}
    provider.enqueue_text("Two years.")
    await _stream(out, "stream", client, tid, graph, input=_ask("warranty?"))
    await _stream(out, "stream_interrupted", client, tid, graph, input=_ask("a refund please"))
    provider.enqueue_text("Refunded.")
    await _stream(out, "stream_resumed", client, tid, graph, command={"resume": {"approved": True}})
    provider.enqueue_text("Waited.")
    out["wait"] = project(await client.runs.wait(tid, graph, input=_ask("and the warranty?")))
    out["wait_interrupted"] = project(
        await client.runs.wait(tid, graph, input=_ask("refund again"))
    )
    provider.enqueue_text("Not this time.")
    run = await client.runs.create(tid, graph, command={"resume": False})
    out["join"] = project(await client.runs.join(tid, run["run_id"]))
    return out
