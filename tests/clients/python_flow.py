"""The README flow with the openapi-python-client package (``threadkeeper_client``), checked by
``mypy --strict`` with no cast and run by tests/integration/test_generated_clients.py.

Usage: python python_flow.py <base url> <api key>
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from typing import Any, assert_never
from uuid import UUID

from threadkeeper_client import AuthenticatedClient
from threadkeeper_client.api.context import compress_context, get_agent_state, read_workdir_file
from threadkeeper_client.api.runs import resume_run, wait_request, wait_run
from threadkeeper_client.api.threads import create_thread, list_messages, post_message
from threadkeeper_client.models import (
    AgentStateOut,
    CompressionEvent,
    CompressOut,
    CreateThreadIn,
    Decision,
    DecisionType,
    DeltaEvent,
    MessageAddedEvent,
    MessageOut,
    MessagePage,
    NothingToCompressOrNotSupportedCode,
    NothingToCompressOrNotSupportedError,
    PostMessageIn,
    PostMessageOut,
    RequestOut,
    RequestStatus,
    ResumeIn,
    RunOut,
    StatusEvent,
    ThreadBusyOrInvalidStateOrAgentUnavailableCode,
    ThreadBusyOrInvalidStateOrAgentUnavailableError,
    ThreadOut,
)

RunEvent = StatusEvent | DeltaEvent | MessageAddedEvent | CompressionEvent


def run_event(data: dict[str, Any]) -> RunEvent:
    """One frame's ``data`` as the model its ``type`` names (the document's RunEvent union)."""
    kind = data["type"]
    if kind == "status":
        return StatusEvent.from_dict(data)
    if kind == "delta":
        return DeltaEvent.from_dict(data)
    if kind == "message":
        return MessageAddedEvent.from_dict(data)
    return CompressionEvent.from_dict(data)


def sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Each event's ``data`` as JSON (comment lines are keep-alives)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield json.loads("\n".join(data))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


def run_of(client: AuthenticatedClient, request_id: UUID) -> UUID:
    """Wait for dispatch: WaitRequest long-polls until a worker took the request and names its
    run (or answers it still ``queued`` after ``timeout`` s: ask again)."""
    for _ in range(10):
        got = wait_request.sync_detailed(request_id, client=client, timeout=30).parsed
        assert isinstance(got, RequestOut), got
        if got.run_id is not None:
            return got.run_id
        assert got.status is not RequestStatus.CANCELLED, "request cancelled"
    raise AssertionError("never dispatched")


def conflict(error: ThreadBusyOrInvalidStateOrAgentUnavailableError) -> str:
    """ResumeRun's 409: exactly its three codes (``assert_never`` checks none is left out)."""
    code = ThreadBusyOrInvalidStateOrAgentUnavailableCode
    match error.error:
        case code.THREAD_BUSY:
            return "thread_busy: retry later"
        case code.INVALID_STATE:
            return "invalid_state: the run is not waiting for a decision"
        case code.AGENT_UNAVAILABLE:
            return "agent_unavailable: the thread's agent is gone"
        case _:
            assert_never(error.error)


def follow(client: AuthenticatedClient, thread_id: UUID, run_id: UUID) -> list[MessageOut]:
    """The run's events, live, each a typed model; stored messages are read by their seq."""
    stored: list[MessageOut] = []
    with client.get_httpx_client().stream("GET", f"/v1/runs/{run_id}/events") as resp:
        assert resp.status_code == 200, resp.status_code
        for data in sse_data(resp.iter_lines()):
            event = run_event(data)
            if isinstance(event, DeltaEvent):
                pass  # streamed text of event.lc_id
            elif isinstance(event, MessageAddedEvent):
                page = list_messages.sync_detailed(
                    thread_id, client=client, after_seq=event.seq - 1, limit=1
                ).parsed
                assert isinstance(page, MessagePage)
                stored.extend(m for m in page.items if m.id == event.message_id)
            elif isinstance(event, CompressionEvent):
                print("compression:", event.reason.value)
            elif event.final:
                print("final:", event.status.value, event.error_code)
    return stored


def compress(client: AuthenticatedClient, thread_id: UUID) -> None:
    """CompressContext: what it did, or (a typed 422) why there was nothing to do."""
    compressed = compress_context.sync_detailed(thread_id, client=client)
    if isinstance(compressed.parsed, NothingToCompressOrNotSupportedError):
        refused = compressed.parsed.error
        if refused is NothingToCompressOrNotSupportedCode.NOTHING_TO_COMPRESS:
            print(f"{compressed.status_code.value}: {refused.value}")
        else:
            print(f"{compressed.status_code.value}: {refused.value} (no manual compression)")
        return
    assert isinstance(compressed.parsed, CompressOut), compressed.parsed
    done = compressed.parsed
    print(
        f"compressed: {done.before_tokens} -> {done.after_tokens} tokens, {done.offloaded} offloaded"
    )


def main(base_url: str, key: str) -> None:
    client = AuthenticatedClient(base_url=base_url, token=key, raise_on_unexpected_status=True)
    thread = create_thread.sync_detailed(client=client, body=CreateThreadIn(title="python")).parsed
    assert isinstance(thread, ThreadOut), thread
    body = PostMessageIn(content="What happens when a lease expires?")
    posted = post_message.sync_detailed(
        thread.id, client=client, body=body, idempotency_key="py-1"
    ).parsed
    again = post_message.sync_detailed(
        thread.id, client=client, body=body, idempotency_key="py-1"
    ).parsed
    assert isinstance(posted, PostMessageOut) and isinstance(again, PostMessageOut)
    assert again.request_id == posted.request_id

    run_id = run_of(client, posted.request_id)
    messages = follow(client, thread.id, run_id)
    print("messages:", " ".join(m.role.value for m in messages))
    run = wait_run.sync_detailed(run_id, client=client).parsed
    assert isinstance(run, RunOut), run
    print("run:", run.status.value, run.input_tokens > 0)

    # A typed 409: the run is not waiting for a decision. Each status of ResumeRun parses into
    # its own class, whose ``error`` is an enum of the codes ResumeRun declares there.
    decisions = ResumeIn(decisions=[Decision(type_=DecisionType.APPROVE)])
    busy = resume_run.sync_detailed(run_id, client=client, body=decisions)
    if isinstance(busy.parsed, ThreadBusyOrInvalidStateOrAgentUnavailableError):
        print(f"{busy.status_code.value}: {conflict(busy.parsed)}")

    # The knowledge-base result is large: compression offloads it to the Workdir.
    compress(client, thread.id)
    state = get_agent_state.sync_detailed(thread.id, client=client).parsed
    assert isinstance(state, AgentStateOut), state
    for m in state.messages:
        if m.offload is None:
            continue
        # A Workdir file with its hash: the offloaded original, checked against its SHA-256.
        file = read_workdir_file.sync_detailed(thread.id, m.offload.path, client=client)
        sha256 = hashlib.sha256(file.content).hexdigest()
        assert sha256 == m.offload.sha256 == file.headers["x-content-sha256"], m.offload.path
        print(f"workdir {m.offload.path}: sha256 ok, {m.offload.original_tokens} tokens")

    # A typed 422: all offloaded already, nothing more to compress.
    compress(client, thread.id)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
