"""CPU per streamed model call by HTTP client: the openai SDK's default (httpx2) against the
aiohttp client the service's models use (``app/agents/provider_http.py``), side by side.

Run: ``.venv/bin/python benchmarks/provider_client.py`` (about a minute; ``--calls``,
``--concurrency``, ``--rounds``).

The provider is the tests' OpenAI-protocol stub served apart (its own process, no latency): a
turn's answer, 60 words in 20 streamed pieces. The model is the service's own ``ChatOpenAI``
(``build_chat_model``: lean calls, ``stream_usage``) streamed with ``astream``, ``--concurrency``
calls at a time; only this process's CPU counts (``time.process_time``), so the stub's work does
not. The two clients alternate round by round (noise on a shared machine hits both alike); the
medians of CPU ms per call and the ratio are printed.
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


async def one_round(model: Any, calls: int, concurrency: int) -> float:
    """CPU ms per call over ``calls`` streamed calls, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def call() -> None:
        async with gate:
            pieces = 0
            async for _ in model.astream(MESSAGES):
                pieces += 1
            assert pieces >= 20, pieces

    start = time.process_time()
    await asyncio.gather(*(call() for _ in range(calls)))
    return (time.process_time() - start) * 1000 / calls


async def measure(base: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """CPU ms per call of each client, round by round, against the stub at ``base``."""
    settings = ModelSettings(llm_base_url=f"{base}/v1", llm_api_key="k")
    holder = SharedHttpClient()
    with shared_http_client(holder):
        aiohttp_model = build_chat_model(settings)
    models = {"httpx2 (SDK default)": build_chat_model(settings), "aiohttp": aiohttp_model}
    for model in models.values():  # connect, warm up
        await one_round(model, 20, 10)
    figures: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            figures[name].append(await one_round(model, args.calls, args.concurrency))
    await holder.aclose()
    return figures


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
        figures = asyncio.run(measure(base, args))
    print(
        f"{args.calls} streamed calls per round, {args.concurrency} at a time, {args.rounds} rounds"
    )
    print_side_by_side(figures, "CPU ms/call", "aiohttp / httpx2")


if __name__ == "__main__":
    main()
