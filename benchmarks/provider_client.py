"""CPU per streamed model call, side by side: by HTTP client, the openai SDK's default (httpx2)
against the aiohttp client the service's models use (``app/agents/provider_http.py``), both
reading a chunk per event; then, on aiohttp, a chunk per event against the chunks that arrived
together coalesced (``app/agents/stream_coalescing.py``); then, against a provider streaming at
its pace, reads as the pieces come against reads paced by
``THREADKEEPER_LLM_STREAM_GATHER_SECONDS`` (the default, 0.05 s).

Run: ``.venv/bin/python benchmarks/provider_client.py`` (about three minutes; ``--calls``,
``--concurrency``, ``--rounds``, ``--latency``).

The provider is the tests' OpenAI-protocol stub served apart (its own process, no latency): a
turn's answer, 60 words in 20 streamed pieces, written at once, so a reader finds them together:
the coalesced figure is the most merging saves (a whole answer in one chunk); a provider that
streams at its own pace is in between, by how late the service reads. For the paced reads a
second stub streams each answer over ``--latency`` seconds (the 20 pieces spread over it, as
``benchmarks/providers.py``'s provider does). The model is the
service's own ``ChatOpenAI`` (``build_chat_model``: lean calls, ``stream_usage``) streamed with
``astream``, ``--concurrency`` calls at a time; only this process's CPU counts
(``time.process_time``), so the stub's work does not. The variants alternate round by round
(noise on a shared machine hits both alike); the medians of CPU ms per call and the ratios are
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from openai import AsyncStream

from app.agents.lean_openai import CoalescingStream
from app.agents.models import build_chat_model
from app.agents.provider_http import SharedHttpClient, shared_http_client
from app.config import ModelSettings
from benchmarks.common import OPENAI_STUB, child_server, print_side_by_side

#: Ends with a tool result, so the stub streams the turn's answer (``tool_then_answer``).
MESSAGES = [
    HumanMessage("What does the handbook say about leave?"),
    AIMessage("", tool_calls=[{"id": "c1", "name": "query_kb", "args": {"query": "leave"}}]),
    ToolMessage("[kb:1] Leave is booked in the portal.", tool_call_id="c1"),
]


#: Model chunks a call streams when each of the answer's 20 pieces is one.
PER_EVENT = 20


async def one_round(model: Any, calls: int, concurrency: int, burst: bool) -> float:
    """CPU ms per call over ``calls`` streamed calls, ``concurrency`` at a time (``burst``: the
    stub writes each answer at once, so a coalescing read merges it)."""
    gate = asyncio.Semaphore(concurrency)
    stream_cls = model.async_client.stream_cls  # AsyncStream[object]: a generic alias
    per_event = not (isinstance(stream_cls, type) and issubclass(stream_cls, CoalescingStream))

    async def call() -> None:
        async with gate:
            pieces = 0
            async for _ in model.astream(MESSAGES):
                pieces += 1
            if per_event:
                assert pieces >= PER_EVENT, pieces
            elif burst:
                assert pieces < PER_EVENT, pieces

    start = time.process_time()
    await asyncio.gather(*(call() for _ in range(calls)))
    return (time.process_time() - start) * 1000 / calls


def per_event(model: Any) -> Any:
    """``model`` reading a chunk per event, as the SDK reads a stream."""
    model.async_client.stream_cls = AsyncStream[object]
    return model


async def measure(
    base: str, paced_base: str, args: argparse.Namespace
) -> list[dict[str, list[float]]]:
    """CPU ms per call of each variant, round by round, against the stub at ``base``: the two
    clients, then a chunk per event against coalesced; then against the stub at ``paced_base``
    (its answers streamed over ``--latency``), reads as they come against paced reads."""
    settings = ModelSettings(
        llm_base_url=f"{base}/v1", llm_api_key="k", llm_stream_gather_seconds=0
    )
    at_pace = ModelSettings(
        llm_base_url=f"{paced_base}/v1", llm_api_key="k", llm_stream_gather_seconds=0
    )
    holder = SharedHttpClient()
    with shared_http_client(holder):
        aiohttp_model, coalesced = build_chat_model(settings), build_chat_model(settings)
        as_they_come = build_chat_model(at_pace)
        gathered = build_chat_model(ModelSettings(llm_base_url=f"{paced_base}/v1", llm_api_key="k"))
    comparisons = [
        {
            "httpx2 (SDK default)": per_event(build_chat_model(settings)),
            "aiohttp": per_event(aiohttp_model),
        },
        {"a chunk per event": aiohttp_model, "coalesced": coalesced},
        {"reads as they come": as_they_come, "paced reads": gathered},
    ]
    out = []
    for index, models in enumerate(comparisons):
        burst = index < 2
        for model in models.values():  # connect, warm up
            await one_round(model, 20, 10, burst)
        figures: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(args.rounds):
            for name, model in models.items():
                figures[name].append(await one_round(model, args.calls, args.concurrency, burst))
        out.append(figures)
    await holder.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="streamed calls per round")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per client")
    parser.add_argument(
        "--latency", type=float, default=1.0, help="seconds the paced provider streams an answer"
    )
    args = parser.parse_args()
    with (
        open(os.devnull, "wb") as quiet,  # the stub's goodbye to streams open at SIGINT
        child_server(str(OPENAI_STUB), ["--latency", "0"], {}, stderr=quiet) as base,
        child_server(
            str(OPENAI_STUB), ["--latency", str(args.latency)], {}, stderr=quiet
        ) as paced_base,
    ):
        clients, coalescing, pacing = asyncio.run(measure(base, paced_base, args))
    print(
        f"{args.calls} streamed calls per round, {args.concurrency} at a time, {args.rounds} rounds"
    )
    print_side_by_side(clients, "CPU ms/call", "aiohttp / httpx2")
    print("on aiohttp, the answer's 20 pieces read together:")
    print_side_by_side(coalescing, "CPU ms/call", "coalesced / a chunk per event")
    print(f"the answer's 20 pieces streamed over {args.latency:g} s:")
    print_side_by_side(pacing, "CPU ms/call", "paced reads / reads as they come")


if __name__ == "__main__":
    main()
