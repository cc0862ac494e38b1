"""The SDK acceptance suite of a served ``create_agent`` graph (``tests/support/graphs/
acceptance``), written against the official ``langgraph-sdk`` only, so the same suite runs
against ``langgraph dev`` (LangGraph's reference server) and against Threadkeeper serving the
same ``langgraph.json``: tokens streamed word by word, a safe tool, an approval interrupt
approved and rejected, the thread's state and history."""

from __future__ import annotations

from typing import Any

from langgraph_sdk import get_client

ACCEPTANCE_GRAPH = "records"


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def _stream(client: Any, tid: str, **kwargs: Any) -> list[tuple[str, Any]]:
    parts = [(p.event, p.data) async for p in client.runs.stream(tid, ACCEPTANCE_GRAPH, **kwargs)]
    assert "error" not in [e for e, _ in parts], parts
    return parts


def _final(parts: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    values = [d for e, d in parts if e == "values"]
    assert values, parts
    return values[-1]["messages"]  # type: ignore[no-any-return]


async def acceptance_suite(url: str, api_key: str | None) -> None:
    client = get_client(url=url, api_key=api_key)
    assistants = await client.assistants.search(graph_id=ACCEPTANCE_GRAPH)
    assert assistants and assistants[0]["graph_id"] == ACCEPTANCE_GRAPH
    tid = (await client.threads.create())["thread_id"]

    # 1. Tokens, word by word, from the model node; the final values end with the answer.
    parts = await _stream(
        client, tid, input=human("hello there friend"), stream_mode=["values", "messages-tuple"]
    )
    chunks = [d[0] for e, d in parts if e == "messages" and d[0]["type"] == "AIMessageChunk"]
    # Streamed before the answer is stored (Threadkeeper coalesces the words it streams into
    # a few deltas per second; LangGraph sends one chunk per token): the text is the same.
    assert chunks and "".join(c["content"] for c in chunks) == "You said: hello there friend"
    assert {d[1]["langgraph_node"] for e, d in parts if e == "messages"} >= {"model"}
    final = _final(parts)
    assert [m["type"] for m in final] == ["human", "ai"]
    assert final[-1]["content"] == "You said: hello there friend"

    # 2. The safe tool runs without asking.
    parts = await _stream(client, tid, input=human("look up r1"), stream_mode=["values"])
    final = _final(parts)
    assert [m["type"] for m in final[-3:]] == ["ai", "tool", "ai"]
    assert final[-2]["content"] == "Ada Lovelace, account opened 1843"
    assert final[-1]["content"] == "Done: Ada Lovelace, account opened 1843"

    # 3. The gated tool waits: the HITLRequest names it and its arguments.
    parts = await _stream(client, tid, input=human("delete r2"), stream_mode=["values", "updates"])
    interrupts = [d["__interrupt__"] for e, d in parts if e == "updates" and "__interrupt__" in d]
    assert interrupts, parts
    request = interrupts[-1][0]["value"]
    assert request["action_requests"][0]["name"] == "delete_record"
    assert request["action_requests"][0]["args"] == {"record_id": "r2"}
    assert "approve" in request["review_configs"][0]["allowed_decisions"]
    thread = await client.threads.get(tid)
    assert thread["status"] == "interrupted"
    state = await client.threads.get_state(tid)
    assert state["tasks"] and state["tasks"][0]["interrupts"][0]["value"] == request

    # 4. Approved: the tool runs, the model answers with its result.
    parts = await _stream(
        client,
        tid,
        command={"resume": {"decisions": [{"type": "approve"}]}},
        stream_mode=["values"],
    )
    final = _final(parts)
    assert final[-2]["type"] == "tool" and final[-2]["content"] == "deleted r2"
    assert final[-1]["content"] == "Done: deleted r2"
    assert (await client.threads.get(tid))["status"] == "idle"

    # 5. Rejected: the tool does not run; the model hears why.
    await _stream(client, tid, input=human("delete r1"), stream_mode=["values"])
    parts = await _stream(
        client,
        tid,
        command={"resume": {"decisions": [{"type": "reject", "message": "not today"}]}},
        stream_mode=["values"],
    )
    final = _final(parts)
    assert final[-2]["type"] == "tool" and "not today" in final[-2]["content"]
    assert "deleted" not in final[-2]["content"]
    assert final[-1]["content"].startswith("Done: ") and "not today" in final[-1]["content"]

    # 6. The thread's state holds the whole conversation, in order.
    state = await client.threads.get_state(tid)
    humans = [m["content"] for m in state["values"]["messages"] if m["type"] == "human"]
    assert humans == ["hello there friend", "look up r1", "delete r2", "delete r1"]
    assert state["next"] == []
