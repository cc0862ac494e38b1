"""Compression benchmark: Threadkeeper's ContextCompressor vs langchain's SummarizationMiddleware.

Run: ``.venv/bin/python benchmarks/compression.py`` (about a minute on 2 cores, no network);
``--kb-session`` runs only the 60-turn ``query_kb`` session (a few seconds).

Each scenario replays a generated, tool-heavy agent thread (retrieval-style ``query_kb`` JSON,
Dify-style chunk lists and generic log text) of 10k-200k raw tokens through an agent loop:
before every model call the method under test may compress the state, and its result is what
the graph would persist. Both methods use the same trigger (request tokens >= threshold, exact
BPE counts), the same "keep recent" budget and the SAME counted, deterministic summarizing chat
model, so summarizer calls are comparable. Reported per scenario and method:

- ``calls``: summarizer (chat model) calls over the whole thread;
- ``peak``/``final``: largest and last request size sent to the model (tokens);
- ``ids``/``urls``: share of all retrieval result ids / URLs still visible to the model at the
  end; ``ids+wd``: ids visible or inside a Workdir file whose path the final view still names
  (readable with ``read_workdir_file``);
- ``noop p50/p99``: cost of the per-call check on the full raw thread when below threshold
  (cache warm), and ``pass p50/p99``: cost of the deterministic offload pass (Threadkeeper).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain.agents.middleware.summarization import (
    DEFAULT_SUMMARY_PROMPT,
    SummarizationMiddleware,
)
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately, get_buffer_string
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from app.agents.middlewares.summary import ContextCompressor
from app.agents.offload import deterministic_pass
from app.agents.recall import search_workdir
from app.agents.tokens import TokenCounter, get_encoding
from app.agents.workdir import INDEX_PATH, Workdir

THRESHOLD = 12_000
PREVIEW_TOKENS = 800
KEEP_RECENT = 3_000
SUMMARY_MAX = 1_200
SIZES = (10_000, 50_000, 100_000, 200_000)
#: The issue's cache scenario: a 60-turn session of query_kb calls only (120 model requests).
KB_SESSION_TURNS = 60
#: Price of a cached prompt token relative to an uncached one.
CACHED_PRICE = 0.10
SYSTEM = SystemMessage(
    content="You are Threadkeeper's assistant. Use query_kb and cite result ids. "
    "Offloaded tool results can be read back with read_workdir_file."
)
_VOCABULARY = (
    "retention policy archive ledger invoice customer region backup replica latency quota "
    "contract renewal audit storage encryption key rotation incident review deployment canary "
    "rollback schema migration index vacuum checkpoint thread budget token summary offload"
)
WORDS = _VOCABULARY.split()


@tool
def query_kb(query: str, top_k: int = 20) -> str:
    """Search the knowledge base and return scored chunks with ids, sources and URLs."""
    return query


@tool
def run_shell(command: str) -> str:
    """Run a diagnostic shell command and return its output."""
    return command


TOOLS = [query_kb, run_shell]


# --- the shared, counted, deterministic summarizer ----------------------------------------------
class ExtractiveSummaryModel(BaseChatModel):
    """Deterministic 'LLM': keeps the first words of each transcript line, capped in tokens."""

    calls: int = 0
    max_tokens: int = SUMMARY_MAX

    @property
    def _llm_type(self) -> str:
        return "benchmark-extractive"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        prompt = messages[-1].text
        transcript = prompt.split("Messages to summarize:", 1)[-1]
        lines = [
            " ".join(line.split()[:14])
            for line in transcript.splitlines()
            if line.startswith(("Human:", "AI:", "Tool:", "Previous summary:"))
        ]
        text = "## SUMMARY\n" + "\n".join(f"- {line}" for line in lines)
        tokens = get_encoding().encode_ordinary(text)[: self.max_tokens]
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(get_encoding().decode(tokens)))]
        )


class ChatModelSummarizer:
    """Threadkeeper ``Summarizer`` backed by the same chat model and prompt as langchain's."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        transcript = get_buffer_string(list(messages))
        if previous_summary:
            transcript = f"Previous summary: {previous_summary}\n{transcript}"
        prompt = DEFAULT_SUMMARY_PROMPT.format(messages=transcript)
        reply = await self.model.ainvoke([HumanMessage(prompt)])
        return reply.text


# --- generated threads --------------------------------------------------------------------------
def _prose(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def kb_result(rng: random.Random, turn: int, dify: bool) -> tuple[str, list[str], list[str]]:
    """A retrieval result (our query_kb shape or a Dify/Milvus chunk list) and its ids/URLs."""
    n = 20
    ids = [f"t{turn:03d}-chunk-{i:02d}" for i in range(n)]
    urls = [f"https://kb.example.com/t{turn}/doc{i}" for i in range(n)]
    if dify:
        payload: Any = [
            {
                "content": _prose(rng, 110),
                "score": round(rng.random(), 4),
                "rerank_score": round(rng.random(), 4),
                "metadata": {
                    "source": urls[i],
                    "chunk_id": ids[i],
                    "file_id": f"file-{turn}-{i // 4}",
                    "chunk_index": i,
                    "filepath": f"/kb/t{turn}/doc{i}.md",
                },
            }
            for i in range(n)
        ]
    else:
        payload = {
            "query": _prose(rng, 5),
            "count": n,
            "results": [
                {
                    "id": ids[i],
                    "doc_id": f"doc-{turn}-{i // 4}",
                    "source": f"handbook/t{turn}/{i}.md",
                    "title": f"Turn {turn} document {i}",
                    "url": urls[i],
                    "score": round(1 - i / 40, 4),
                    "content": _prose(rng, 110),
                }
                for i in range(n)
            ],
        }
    return json.dumps(payload), ids, urls


def log_output(rng: random.Random, turn: int) -> str:
    return "\n".join(
        f"2025-01-{turn % 28 + 1:02d}T10:{i // 60:02d}:{i % 60:02d} INFO worker-{i % 7} "
        f"{_prose(rng, 12)}"
        for i in range(140)
    )


Turn = tuple[HumanMessage, AIMessage, ToolMessage, AIMessage]


def generate_thread(
    target_tokens: int, seed: int, *, max_turns: int | None = None, kb_only: bool = False
) -> tuple[list[Turn], set[str], set[str]]:
    """Turns (question, tool call, tool result, answer) until ``target_tokens`` raw tokens
    (or ``max_turns``); ``kb_only``: every turn is a ``query_kb`` call (our result shape)."""
    rng = random.Random(seed)
    counter = TokenCounter()
    turns: list[Turn] = []
    all_ids: set[str] = set()
    all_urls: set[str] = set()
    total = 0
    while total < target_tokens and (max_turns is None or len(turns) < max_turns):
        t = len(turns)
        call_id = f"call_{seed}_{t}"
        if t % 3 == 2 and not kb_only:
            name, args, text = "run_shell", {"command": f"tail -n 140 /var/log/w{t}.log"}, ""
            text = log_output(rng, t)
            cited = ""
        else:
            name, args = "query_kb", {"query": _prose(rng, 5)}
            text, ids, urls = kb_result(rng, t, dify=t % 3 == 1 and not kb_only)
            all_ids.update(ids)
            all_urls.update(urls)
            cited = f" Sources: {ids[0]}, {ids[1]}."
        msgs: Turn = (
            HumanMessage(f"Question {t}: {_prose(rng, 25)}?", id=f"h{t}"),
            AIMessage("", id=f"a{t}", tool_calls=[{"name": name, "args": args, "id": call_id}]),
            ToolMessage(text, tool_call_id=call_id, name=name, id=f"t{t}"),
            AIMessage(f"Answer {t}: {_prose(rng, 60)}.{cited}", id=f"r{t}"),
        )
        turns.append(msgs)
        total += counter.count_messages(msgs)
    return turns, all_ids, all_urls


# --- the two methods in an agent loop -----------------------------------------------------------
Compress = Callable[[list[BaseMessage]], Any]


async def replay(
    turns: Sequence[Turn], compress: Compress, counter: TokenCounter
) -> list[list[BaseMessage]]:
    """Agent loop: before each model call the state may be compressed (and persisted).

    Returns every request's message list as sent (system prompt and tools are the same each time).
    """
    state: list[BaseMessage] = []
    sent: list[list[BaseMessage]] = []
    for human, call, result, answer in turns:
        state.append(human)
        state = await compress(state)  # model call 1 -> emits the tool call
        sent.append(list(state))
        state += [call, result]
        state = await compress(state)  # model call 2 -> emits the answer
        sent.append(list(state))
        state.append(answer)
    sent.append(list(await compress([*state, HumanMessage("And now?", id="final")])))
    return sent


def _wire(message: BaseMessage) -> tuple[Any, ...]:
    """What the provider sees of a message (ids and metadata are not sent)."""
    calls = getattr(message, "tool_calls", None) or []
    return (
        message.type,
        message.text,
        getattr(message, "tool_call_id", None),
        json.dumps([(c["id"], c["name"], c["args"]) for c in calls], sort_keys=True),
    )


def cache_figures(
    requests: Sequence[Sequence[BaseMessage]], counter: TokenCounter
) -> dict[str, Any]:
    """Prefix-cache view of a sequence of requests.

    A request is a *rewrite* when the previous request's messages are not an unchanged prefix of
    it. Its cached tokens are system prompt + tools + the longest unchanged message prefix
    shared with the previous request (what a provider's prompt cache can reuse); effective cost
    bills cached tokens at ``CACHED_PRICE`` of the normal input price.
    """
    base = counter.count_request(SYSTEM, TOOLS, [])
    rewrites = 0
    total = cached = 0
    previous: list[tuple[Any, ...]] | None = None
    for request in requests:
        wire = [_wire(m) for m in request]
        size = base + counter.count_messages(request)
        reuse = 0
        if previous is not None:
            common = 0
            for a, b in zip(previous, wire, strict=False):
                if a != b:
                    break
                common += 1
            if common < len(previous):
                rewrites += 1
            reuse = base + counter.count_messages(request[:common])
        total += size
        cached += reuse
        previous = wire
    return {
        "requests": len(requests),
        "rewrites_per_100": 100 * rewrites / len(requests),
        "prefix_reuse": cached / total,
        "cost": (total - cached) + CACHED_PRICE * cached,
        "cost_nocache": total,
    }


def threadkeeper_method(root: Path, model: ExtractiveSummaryModel, counter: TokenCounter) -> Any:
    compressor = ContextCompressor(
        summarizer=ChatModelSummarizer(model),
        workdir=Workdir(root),
        counter=counter,
        summary_threshold=THRESHOLD,
        tool_result_preview_tokens=PREVIEW_TOKENS,
        summary_keep_recent_tokens=KEEP_RECENT,
        summary_max_tokens=SUMMARY_MAX,
    )

    async def compress(state: list[BaseMessage]) -> list[BaseMessage]:
        outcome = await compressor.compress(
            state, thread_id="bench", system_message=SYSTEM, tools=TOOLS, force=False
        )
        return list(outcome.messages)

    return compress, compressor


def langchain_method(model: ExtractiveSummaryModel, counter: TokenCounter) -> Any:
    base = counter.count_request(SYSTEM, TOOLS, [])
    middleware = SummarizationMiddleware(
        model=model,
        trigger=("tokens", THRESHOLD - base),  # same request-size trigger as ours
        keep=("tokens", KEEP_RECENT),
        token_counter=counter.count_messages,
    )

    async def compress(state: list[BaseMessage]) -> list[BaseMessage]:
        update = await middleware.abefore_model({"messages": state}, None)  # type: ignore[arg-type]
        if not update:
            return state
        messages = update["messages"]
        assert isinstance(messages[0], RemoveMessage) and messages[0].id == REMOVE_ALL_MESSAGES
        return list(messages[1:])

    return compress, middleware


def readable_share(view: Sequence[BaseMessage], needles: set[str], thread_dir: Path) -> float:
    """Share of ``needles`` visible, or inside a Workdir file the view still names."""
    text = "\n".join(m.text for m in view)
    files = sorted(thread_dir.glob("tool-results/*.txt")) if thread_dir.is_dir() else []
    named = [f.read_text(encoding="utf-8") for f in files if f"tool-results/{f.name}" in text]
    haystack = "\n".join([text, *named])
    return sum(1 for n in needles if n in haystack) / len(needles) if needles else 1.0


async def recall_share(
    view: Sequence[BaseMessage], needles: set[str], workdir: Workdir | None, thread_id: str
) -> float:
    """Share of ``needles`` visible, in a Workdir file the view names, in a file listed by an
    index the view names, or found by ``search_workdir`` (the model's three ways back)."""
    if not needles:
        return 1.0
    text = "\n".join(m.text for m in view)
    found = {n for n in needles if n in text}
    if workdir is not None and found != needles:
        entries = await workdir.read_index(thread_id)
        listed = INDEX_PATH in text
        for path in dict.fromkeys(str(e["path"]) for e in entries):
            if listed or path in text:
                body, _, _ = await workdir.read_text(thread_id, path)
                found |= {n for n in needles - found if n in body}
        for needle in needles - found:
            if any(needle in h.snippet for h in await search_workdir(workdir, thread_id, needle)):
                found.add(needle)
    return len(found) / len(needles)


def visible_share(view: Sequence[BaseMessage], needles: set[str]) -> float:
    if not needles:
        return 1.0
    text = "\n".join(m.text for m in view)
    return sum(1 for n in needles if n in text) / len(needles)


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(median, p99) in ms."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def timings(fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return percentiles(samples)


async def scenario(
    size: int, seed: int, root: Path, *, max_turns: int | None = None, kb_only: bool = False
) -> list[dict[str, Any]]:
    turns, ids, urls = generate_thread(size, seed, max_turns=max_turns, kb_only=kb_only)
    raw = [m for t in turns for m in t]
    rows: list[dict[str, Any]] = []
    name = f"{'kb' if kb_only else 'mix'}-{size}"
    for label in ("threadkeeper", "langchain"):
        counter = TokenCounter()
        model = ExtractiveSummaryModel()
        folder = root / f"{label}-{name}"
        folder.mkdir()
        workdir: Workdir | None = None
        if label == "threadkeeper":
            compress, _ = threadkeeper_method(folder, model, counter)
            workdir = Workdir(folder)
        else:
            compress, _ = langchain_method(model, counter)
        started = time.perf_counter()
        requests = await replay(turns, compress, counter)
        elapsed = time.perf_counter() - started
        view = requests[-1]
        sent = [counter.count_request(SYSTEM, TOOLS, r) for r in requests]
        rows.append(
            {
                "size": size,
                "scenario": f"{len(turns)} turns{' query_kb' if kb_only else ''}",
                "raw": counter.count_request(SYSTEM, TOOLS, raw),
                "method": label,
                "calls": model.calls,
                "peak": max(sent),
                "final": sent[-1],
                "ids": visible_share(view, ids),
                "urls": visible_share(view, urls),
                "readable": readable_share(view, ids, folder / "bench"),
                "recall": await recall_share(view, ids, workdir, "bench"),
                "replay_s": elapsed,
                **cache_figures(requests, counter),
            }
        )
    return rows


async def timed_scenario(size: int, seed: int, root: Path) -> list[dict[str, Any]]:
    rows = await scenario(size, seed, root)
    turns, _, _ = generate_thread(size, seed)
    raw = [m for t in turns for m in t]
    timing_root = root / f"timing-{size}"
    timing_root.mkdir()
    rows[0].update(await noop_and_pass(raw, timing_root))
    rows[1].update(noop_langchain(raw))
    return rows


async def noop_and_pass(raw: list[BaseMessage], root: Path) -> dict[str, Any]:
    """Per-call check below threshold (cache warm) and the deterministic pass on the raw thread."""
    counter = TokenCounter()
    compressor = ContextCompressor(
        summarizer=ChatModelSummarizer(ExtractiveSummaryModel()),
        workdir=Workdir(root),
        counter=counter,
        summary_threshold=10**9,
    )

    async def check() -> None:
        await compressor.compress(raw, thread_id="x", system_message=SYSTEM, tools=TOOLS)

    await check()  # warm the cache (the first count encodes everything)
    samples = []
    for _ in range(200):
        start = time.perf_counter()
        await check()
        samples.append((time.perf_counter() - start) * 1000)
    workdir = Workdir(root)
    passes = []
    for run in range(7):
        start = time.perf_counter()
        await deterministic_pass(
            raw,
            thread_id=f"p{run}",
            workdir=workdir,
            counter=counter,
            preview_tokens=PREVIEW_TOKENS,
        )
        passes.append((time.perf_counter() - start) * 1000)
    return {"noop": percentiles(samples), "pass": percentiles(passes)}


def noop_langchain(raw: list[BaseMessage]) -> dict[str, Any]:
    """langchain's before_model below its trigger: with our cached counter and its default."""
    counter = TokenCounter()
    model = ExtractiveSummaryModel()
    exact = SummarizationMiddleware(
        model=model, trigger=("tokens", 10**9), token_counter=counter.count_messages
    )
    approx = SummarizationMiddleware(
        model=model, trigger=("tokens", 10**9), token_counter=count_tokens_approximately
    )
    state: Any = {"messages": list(raw)}
    exact.before_model(state, None)  # type: ignore[arg-type]
    return {
        "noop": timings(lambda: exact.before_model(state, None), 200),  # type: ignore[arg-type]
        "noop_approx": timings(lambda: approx.before_model(state, None), 50),  # type: ignore[arg-type]
    }


def fmt_ms(pair: tuple[float, float] | None) -> str:
    return "-" if pair is None else f"{pair[0]:.2f}/{pair[1]:.2f}"


async def main() -> None:
    started = time.perf_counter()
    kb_session_only = "--kb-session" in sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="tk-bench-") as tmp:
        rows: list[dict[str, Any]] = []
        for seed, size in enumerate(() if kb_session_only else SIZES, start=1):
            rows += await timed_scenario(size, seed, Path(tmp))
        kb_rows = await scenario(10**9, 99, Path(tmp), max_turns=KB_SESSION_TURNS, kb_only=True)
    print(
        f"threshold={THRESHOLD} preview={PREVIEW_TOKENS} keep_recent={KEEP_RECENT} "
        f"summary_max={SUMMARY_MAX} (tokens, exact cl100k BPE; request = system+tools+messages)"
    )
    header = (
        f"{'raw tokens':>10} {'method':<13} {'calls':>5} {'peak':>7} {'final':>7} "
        f"{'ids':>6} {'urls':>6} {'ids+wd':>6} {'noop p50/p99 ms':>16} {'pass p50/p99 ms':>16} "
        f"{'replay s':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['raw']:>10} {row['method']:<13} {row['calls']:>5} {row['peak']:>7} "
            f"{row['final']:>7} {row['ids']:>6.0%} {row['urls']:>6.0%} {row['readable']:>6.0%} "
            f"{fmt_ms(row.get('noop')):>16} {fmt_ms(row.get('pass')):>16} "
            f"{row['replay_s']:>8.2f}"
        )
    print()
    print(
        "Prompt cache and recall: rewrites = requests whose previous request is not an unchanged"
        " prefix (per 100 requests); reuse = share of request tokens that are that prefix;"
        f" cost = input tokens with cached ones billed at {CACHED_PRICE:.0%} (k tokens, and vs"
        " no cache); recall = share of all result ids visible, in a file or index the final view"
        " names, or found by search_workdir."
    )
    header = (
        f"{'scenario':>20} {'raw tokens':>10} {'method':<13} {'requests':>8} {'rewrites':>8} "
        f"{'reuse':>6} {'cost k':>8} {'vs none':>7} {'summarizer':>10} {'recall':>6}"
    )
    print(header)
    print("-" * len(header))
    for row in [*rows, *kb_rows]:
        print(
            f"{row['scenario']:>20} {row['raw']:>10} {row['method']:<13} {row['requests']:>8} "
            f"{row['rewrites_per_100']:>8.1f} {row['prefix_reuse']:>6.1%} "
            f"{row['cost'] / 1000:>8.1f} {row['cost'] / row['cost_nocache']:>7.1%} "
            f"{row['calls']:>10} {row['recall']:>6.1%}"
        )
    print()
    print("langchain no-op with its default count_tokens_approximately (p50/p99 ms):")
    for row in rows:
        if row["method"] == "langchain":
            print(f"  raw {row['raw']:>7}: {fmt_ms(row.get('noop_approx'))}")
    print(f"\ntotal benchmark time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
