"""The ``values`` a server returns for a graph with state keys of its own (issue 33), through
the official ``langgraph-sdk`` only, so the same scenario runs against Threadkeeper and against
``langgraph dev`` serving the same example: each ``values`` part of ``runs.stream`` (one per
step, the first at the run's start), the result of ``runs.wait`` and of ``runs.join``, with
the graph's own keys (``model_calls``; ``route``, ``documents``, ``approved``) beside
``messages`` and ``__interrupt__`` when the run stopped.

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


async def _stream(client: Any, tid: str, graph: str, **kwargs: Any) -> list[dict[str, Any]]:
    parts = [
        (p.event, p.data)
        async for p in client.runs.stream(tid, graph, stream_mode=["values", "updates"], **kwargs)
    ]
    assert "error" not in [e for e, _ in parts], parts
    return [project(d) for e, d in parts if e == "values"]


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
    out["stream"] = await _stream(client, tid, graph, input=_ask("who is r1?"))
    provider.enqueue_tool_call("delete_record", {"record_id": "r2"})
    out["stream_interrupted"] = await _stream(client, tid, graph, input=_ask("delete r2"))
    provider.enqueue_text("Deleted.")
    approve = {"decisions": [{"type": "approve"}]}
    out["stream_resumed"] = await _stream(client, tid, graph, command={"resume": approve})
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
    out["stream"] = await _stream(client, tid, graph, input=_ask("warranty?"))
    out["stream_interrupted"] = await _stream(client, tid, graph, input=_ask("a refund please"))
    provider.enqueue_text("Refunded.")
    out["stream_resumed"] = await _stream(
        client, tid, graph, command={"resume": {"approved": True}}
    )
    provider.enqueue_text("Waited.")
    out["wait"] = project(await client.runs.wait(tid, graph, input=_ask("and the warranty?")))
    out["wait_interrupted"] = project(
        await client.runs.wait(tid, graph, input=_ask("refund again"))
    )
    provider.enqueue_text("Not this time.")
    run = await client.runs.create(tid, graph, command={"resume": False})
    out["join"] = project(await client.runs.join(tid, run["run_id"]))
    return out
