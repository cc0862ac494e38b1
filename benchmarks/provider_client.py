"""CPU per streamed model call, side by side: by HTTP client, the openai SDK's default (httpx2)
against the aiohttp client the service's models use (``app/agents/provider_http.py``), both
reading a chunk per event; then, on aiohttp, a chunk per event against the chunks that arrived
together coalesced (``app/agents/stream_coalescing.py``).

Run: ``.venv/bin/python benchmarks/provider_client.py`` (about two minutes; ``--calls``,
``--concurrency``, ``--rounds``).

The provider is the tests' OpenAI-protocol stub served apart (its own process, no latency): a
turn's answer, 60 words in 20 streamed pieces, written at once, so a reader finds them together:
the coalesced figure is the most merging saves (a whole answer in one chunk); a provider that
streams at its own pace is in between, by how late the service reads. The model is the
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


async def one_round(model: Any, calls: int, concurrency: int) -> float:
    """CPU ms per call over ``calls`` streamed calls, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)
    per_event = model.async_client.stream_cls is not CoalescingStream

    async def call() -> None:
        async with gate:
            pieces = 0
            async for _ in model.astream(MESSAGES):
                pieces += 1
            assert pieces >= PER_EVENT if per_event else pieces < PER_EVENT, pieces

    start = time.process_time()
    await asyncio.gather(*(call() for _ in range(calls)))
    return (time.process_time() - start) * 1000 / calls


def per_event(model: Any) -> Any:
    """``model`` reading a chunk per event, as the SDK reads a stream."""
    model.async_client.stream_cls = AsyncStream[object]
    return model


async def measure(base: str, args: argparse.Namespace) -> list[dict[str, list[float]]]:
    """CPU ms per call of each variant, round by round, against the stub at ``base``: the two
    clients, then a chunk per event against coalesced."""
    settings = ModelSettings(llm_base_url=f"{base}/v1", llm_api_key="k")
    holder = SharedHttpClient()
    with shared_http_client(holder):
        aiohttp_model, coalesced = build_chat_model(settings), build_chat_model(settings)
    comparisons = [
        {
            "httpx2 (SDK default)": per_event(build_chat_model(settings)),
            "aiohttp": per_event(aiohttp_model),
        },
        {"a chunk per event": aiohttp_model, "coalesced": coalesced},
    ]
    out = []
    for models in comparisons:
        for model in models.values():  # connect, warm up
            await one_round(model, 20, 10)
        figures: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(args.rounds):
            for name, model in models.items():
                figures[name].append(await one_round(model, args.calls, args.concurrency))
        out.append(figures)
    await holder.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="streamed calls per round")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per client")
    args = parser.parse_args()
    with (
        open(os.devnull, "wb") as quiet,  # the stub's goodbye to streams open at SIGINT
        child_server(str(OPENAI_STUB), ["--latency", "0"], {}, stderr=quiet) as base,
    ):
        clients, coalescing = asyncio.run(measure(base, args))
    print(
        f"{args.calls} streamed calls per round, {args.concurrency} at a time, {args.rounds} rounds"
    )
    print_side_by_side(clients, "CPU ms/call", "aiohttp / httpx2")
    print("on aiohttp, the answer's 20 pieces read together:")
    print_side_by_side(coalescing, "CPU ms/call", "coalesced / a chunk per event")


if __name__ == "__main__":
    main()
