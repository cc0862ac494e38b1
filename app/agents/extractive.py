"""The offline, deterministic default model and summarizer.

Why: Threadkeeper must run (and be tested end to end) with no LLM endpoint. These classes do not
pretend to be language models: they *extract*. The chat model asks ``query_kb`` for every user
turn and answers with the most relevant sentences of the results, citing ``[kb:<id>]``; the
summarizer keeps the first sentence of each turn, the tool calls made and every id / URL cited.
Same input, same output, always.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from app.agents.messages import marker, message_text, offload_info
from app.agents.previews import preview_result_ids
from app.agents.terms import terms as _terms
from app.agents.tokens import count_tokens, truncate_to_tokens

__all__ = [
    "KB_TOOL_NAME",
    "ExtractiveChatModel",
    "ExtractiveSummarizer",
]

KB_TOOL_NAME = "query_kb"
#: Full-text search over the thread's offloaded originals (app.agents.tools).
SEARCH_TOOL_NAME = "search_workdir"
MODEL_NAME = "extractive"
_MAX_SENTENCE_CHARS = 400


def _messages_tokens(messages: Sequence[BaseMessage]) -> int:
    total = 0
    for message in messages:
        total += count_tokens(message_text(message))
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                total += count_tokens(call["name"]) + count_tokens(json.dumps(call["args"]))
    return total


# --------------------------------------------------------------------------- text helpers
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])\s*|\n+")
_URL = re.compile(r"https?://[^\s\"'<>)\]]+")
_KB_CITE = re.compile(r"\[kb:([^\]\s]+)\]")


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for raw in _SENTENCE_SPLIT.split(text):
        sentence = " ".join(raw.split())
        if not sentence:
            continue
        if len(sentence) > _MAX_SENTENCE_CHARS:
            sentence = sentence[: _MAX_SENTENCE_CHARS - 1].rstrip() + "…"
        out.append(sentence)
    return out


def _first_sentence(text: str) -> str:
    sentences = _sentences(text)
    return sentences[0] if sentences else ""


def _urls(text: str) -> list[str]:
    return [url.rstrip(".,;:!?") for url in _URL.findall(text)]


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dedupe(items: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


# --------------------------------------------------------------------------- kb results
@dataclass(frozen=True)
class _Result:
    ident: str | None
    content: str
    score: float
    title: str = ""
    url: str = ""


def _as_result(item: Any) -> _Result | None:
    """Read our own ``query_kb`` rows, Milvus/Dify-style chunks and Tavily-style results."""
    if isinstance(item, str):
        return _Result(ident=None, content=item, score=0.0)
    if not isinstance(item, dict):
        return None
    raw_metadata = item.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    ident = item.get("id", item.get("chunk_id", metadata.get("chunk_id")))
    content = item.get("content") or item.get("text") or item.get("preview") or ""
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    score: Any = item.get("score", item.get("rerank_score", 0.0))
    try:
        score_value = float(score)
    except (TypeError, ValueError):
        score_value = 0.0
    return _Result(
        ident=None if ident is None else str(ident),
        content=content,
        score=score_value,
        title=str(item.get("title") or ""),
        url=str(item.get("url") or ""),
    )


def _parse_results(content: str) -> list[_Result] | None:
    """Results of a JSON tool output; None when the content is not JSON (e.g. a preview)."""
    try:
        data = json.loads(content)
    except (TypeError, ValueError):
        return None
    items: Any
    if isinstance(data, list):
        items = data
    elif isinstance(data, dict) and isinstance(data.get("results"), list):
        items = data["results"]
    else:
        return None
    return [r for r in (_as_result(item) for item in items) if r is not None]


@dataclass(frozen=True)
class _Candidate:
    sentence: str
    overlap: int
    result_score: float
    order: int
    ident: str | None


def _best_sentences(results: Sequence[_Result], question: str, limit: int) -> list[_Candidate]:
    """Up to ``limit`` sentences ranked by term overlap with the question.

    Ties go to the better-scored result, then to the earlier position. When nothing overlaps,
    the first sentence of the top result (the knowledge base already ranked them) is used.
    """
    q_terms = _terms(question)
    candidates: list[_Candidate] = []
    order = 0
    for result in results:
        for sentence in _sentences(result.content):
            overlap = len(_terms(sentence) & q_terms)
            candidates.append(_Candidate(sentence, overlap, result.score, order, result.ident))
            order += 1
    if not candidates:
        return []
    ranked = sorted(candidates, key=lambda c: (-c.overlap, -c.result_score, c.order))
    chosen: list[_Candidate] = []
    seen: set[str] = set()
    for candidate in ranked:
        if candidate.overlap == 0 or len(chosen) >= limit:
            break
        if candidate.sentence.lower() in seen:
            continue
        seen.add(candidate.sentence.lower())
        chosen.append(candidate)
    return chosen or [min(candidates, key=lambda c: c.order)]


def _holds_offloads(messages: Sequence[BaseMessage]) -> bool:
    """The view shows offloaded results (previews, or a summary naming the index): only then
    can ``search_workdir`` find anything."""
    return any(offload_info(m) is not None or marker(m).get("kind") == "summary" for m in messages)


def _kb_answers(message: ToolMessage, question: str) -> bool:
    """Whether a ``query_kb`` result itself answers the question (an error is reported as is;
    a preview or a result with nothing matching does not answer)."""
    if message.status == "error":
        return True
    results = _parse_results(message_text(message))
    if results is None:
        return False
    return any(c.overlap > 0 for c in _best_sentences(results, question, 1))


_PREVIEW_ID = re.compile(r"""(?:\bid|"id")\s*[:=]\s*"?([A-Za-z0-9][A-Za-z0-9_.:\-]*)""")


def _preview_ids(content: str) -> list[str]:
    """Result ids a preview names: the ``id`` column of a structured preview (ids are named
    once in its legend line, not per result), else ``id=`` / ``"id":`` pairs in the text."""
    column = preview_result_ids(content)
    if column is not None:
        return column
    return _PREVIEW_ID.findall(content)


# --------------------------------------------------------------------------- the chat model
def _tool_names(kwargs: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for tool in kwargs.get("tools") or []:
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            if isinstance(name, str):
                names.append(name)
    return names


def _call_id(text: str, message_count: int) -> str:
    digest = hashlib.sha256(f"{message_count}\x00{text}".encode()).hexdigest()
    return f"call_{digest[:12]}"


class ExtractiveChatModel(BaseChatModel):
    """A deterministic chat model that looks things up and quotes; it never invents text.

    * last message is a user turn and ``query_kb`` is bound -> one ``query_kb`` tool call;
    * last message is a ``query_kb`` result -> the 1-3 most relevant sentences, cited ``[kb:id]``;
      when nothing in it matches the question, or it arrived as a preview (offloaded), the
      thread holds offloaded results and ``search_workdir`` is bound, one ``search_workdir`` call
      first: an old, summarized-away
      tool result may hold the answer, and an offloaded one is read back by passage;
    * last message is a ``search_workdir`` result -> the best sentences, cited with their
      result id and workdir path;
    * otherwise -> the most relevant sentences of the conversation (or of the last tool output).
    """

    model_name: str = MODEL_NAME
    max_answer_sentences: int = 3
    kb_tool_name: str = KB_TOOL_NAME

    @property
    def _llm_type(self) -> str:
        return "extractive"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools as OpenAI-format schemas; their names reach ``_generate`` via kwargs."""
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    # ---------------------------------------------------------------- decision
    def respond(self, messages: Sequence[BaseMessage], **kwargs: Any) -> AIMessage:
        """The whole (deterministic) policy; public so tests and tools can call it directly."""
        tool_names = _tool_names(kwargs)
        tool_choice = kwargs.get("tool_choice")
        kb_bound = self.kb_tool_name in tool_names and tool_choice != "none"
        last = messages[-1] if messages else None
        if isinstance(last, HumanMessage) and kb_bound:
            question = message_text(last)
            call = {
                "name": self.kb_tool_name,
                "args": {"query": question},
                "id": _call_id(question, len(messages)),
                "type": "tool_call",
            }
            return self._message("", [call], messages)
        if isinstance(last, ToolMessage):
            tool_name = self._tool_name_of(last, messages)
            if tool_name == self.kb_tool_name:
                question = self._question(messages, last)
                can_search = (
                    SEARCH_TOOL_NAME in tool_names
                    and tool_choice != "none"
                    and _holds_offloads(messages)
                )
                if can_search and not _kb_answers(last, question):
                    call = {
                        "name": SEARCH_TOOL_NAME,
                        "args": {"query": self._question(messages, None), "limit": 3},
                        "id": _call_id(f"search\x00{question}", len(messages)),
                        "type": "tool_call",
                    }
                    return self._message("", [call], messages)
                return self._message(self._answer_from_kb(last, messages), [], messages)
            if tool_name == SEARCH_TOOL_NAME:
                return self._message(self._answer_from_search(last, messages), [], messages)
            return self._message(self._answer_from_tool(last, messages), [], messages)
        return self._message(self._answer_from_conversation(messages), [], messages)

    def _message(
        self, text: str, tool_calls: list[dict[str, Any]], messages: Sequence[BaseMessage]
    ) -> AIMessage:
        input_tokens = _messages_tokens(messages)
        output_tokens = count_tokens(text) + sum(
            count_tokens(c["name"]) + count_tokens(json.dumps(c["args"])) for c in tool_calls
        )
        usage = UsageMetadata(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=input_tokens + output_tokens,
        )
        return AIMessage(
            content=text,
            tool_calls=tool_calls,  # type: ignore[arg-type]
            usage_metadata=usage,
            response_metadata={
                "model_name": self.model_name,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            },
        )

    @staticmethod
    def _tool_name_of(message: ToolMessage, messages: Sequence[BaseMessage]) -> str | None:
        if message.name:
            return message.name
        for previous in reversed(messages):
            if isinstance(previous, AIMessage):
                for call in previous.tool_calls:
                    if call.get("id") == message.tool_call_id:
                        return call["name"]
        return None

    @staticmethod
    def _question(messages: Sequence[BaseMessage], tool_message: ToolMessage | None) -> str:
        """The last user turn, plus the query the tool was called with."""
        parts: list[str] = []
        for previous in reversed(messages):
            if isinstance(previous, HumanMessage):
                parts.append(message_text(previous))
                break
        if tool_message is not None:
            for previous in reversed(messages):
                if isinstance(previous, AIMessage):
                    for call in previous.tool_calls:
                        if call.get("id") == tool_message.tool_call_id:
                            parts.extend(str(v) for v in call["args"].values())
        return " ".join(parts)

    def _answer_from_kb(self, message: ToolMessage, messages: Sequence[BaseMessage]) -> str:
        question = self._question(messages, message)
        content = message_text(message)
        if message.status == "error":
            reason = _first_sentence(content) or "unknown error"
            return f"The knowledge base lookup failed: {reason}"
        results = _parse_results(content)
        if results is None:
            return self._answer_from_preview(content, question)
        results = [r for r in results if r.content.strip()]
        if not results:
            return f'I found nothing relevant in the knowledge base for "{_short(question)}".'
        picked = _best_sentences(results, question, self.max_answer_sentences)
        cited = " ".join(f"{c.sentence} [kb:{c.ident}]" if c.ident else c.sentence for c in picked)
        return f"From the knowledge base: {cited}"

    def _answer_from_search(self, message: ToolMessage, messages: Sequence[BaseMessage]) -> str:
        """Quote the best passages of earlier tool results, citing result id and file."""
        question = self._question(messages, None)
        try:
            hits = json.loads(message_text(message)).get("hits") or []
        except (TypeError, ValueError, AttributeError):
            hits = []
        results: list[_Result] = []
        where: dict[str, str] = {}
        for hit in hits:
            if not isinstance(hit, dict):
                continue
            result = hit.get("result")
            rid = result.get("id") if isinstance(result, dict) else None
            ident = f"{hit.get('path')}@{hit.get('offset')}"
            where[ident] = f"({hit.get('path')}, chars {hit.get('offset')}-{hit.get('end')})"
            if rid:
                where[ident] = f"[kb:{rid}] {where[ident]}"
            text = str(hit.get("passage") or hit.get("snippet") or "")
            results.append(_Result(ident, text, 0.0))
        best = _best_sentences(results, question, self.max_answer_sentences)
        picked = [c for c in best if c.overlap > 0]
        if not picked:
            return (
                "I found nothing relevant in the knowledge base or in this thread's earlier "
                f'tool results for "{_short(question)}".'
            )
        cited = " ".join(f"{c.sentence} {where[c.ident or '']}" for c in picked)
        return f"From this thread's earlier tool results: {cited}"

    def _answer_from_preview(self, content: str, question: str) -> str:
        """A shortened (offloaded) or non-JSON result: quote it and name the ids it mentions."""
        picked = _best_sentences([_Result(None, content, 0.0)], question, self.max_answer_sentences)
        if not picked:
            return f'I found nothing relevant in the knowledge base for "{_short(question)}".'
        text = " ".join(c.sentence for c in picked)
        ids = _dedupe(_preview_ids(content))[:10]
        refs = f" (results: {', '.join(f'[kb:{i}]' for i in ids)})" if ids else ""
        return f"From a preview of the knowledge base results: {text}{refs}"

    def _answer_from_tool(self, message: ToolMessage, messages: Sequence[BaseMessage]) -> str:
        question = self._question(messages, message)
        content = message_text(message)
        results = _parse_results(content)
        if results is None:
            results = [_Result(None, content, 0.0)]
        picked = _best_sentences([r for r in results if r.content.strip()], question, 3)
        name = message.name or "the tool"
        if not picked:
            return f"{name} returned nothing usable."
        return f"From {name}: " + " ".join(c.sentence for c in picked)

    def _answer_from_conversation(self, messages: Sequence[BaseMessage]) -> str:
        last_human = next(
            (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)),
            None,
        )
        if last_human is None:
            return "There is no question to answer yet."
        question = message_text(messages[last_human])
        context = [
            _Result(None, message_text(m), 0.0)
            for i, m in enumerate(messages)
            if i != last_human and not isinstance(m, SystemMessage) and message_text(m).strip()
        ]
        picked = [
            c
            for c in _best_sentences(context, question, self.max_answer_sentences)
            if c.overlap > 0
        ]
        if not picked:
            return (
                "I have no knowledge base results for this and nothing earlier in the "
                f'conversation matches "{_short(question)}".'
            )
        return "From earlier in this conversation: " + " ".join(c.sentence for c in picked)

    # ---------------------------------------------------------------- BaseChatModel hooks
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.respond(messages, **kwargs))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Pure CPU and fast: no thread pool hop needed.
        return self._generate(messages, stop, None, **kwargs)

    def _chunks(self, message: AIMessage) -> Iterator[ChatGenerationChunk]:
        """Word-sized text deltas, one tool-call chunk per call, then usage on the last chunk."""
        text = message.text
        for piece in re.findall(r"\S+\s*|\s+", text):
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
        for index, call in enumerate(message.tool_calls):
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        tool_call_chunk(
                            name=call["name"],
                            args=json.dumps(call["args"]),
                            id=call["id"],
                            index=index,
                        )
                    ],
                )
            )
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata=message.usage_metadata,
                response_metadata=dict(message.response_metadata),
                chunk_position="last",
            )
        )

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(self.respond(messages, **kwargs)):
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(self.respond(messages, **kwargs)):
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


# --------------------------------------------------------------------------- the summarizer
_REF_KEYS = ("id", "doc_id", "chunk_id", "file_id")
_REFS_PREFIX = "References cited: "
#: Header lines (ours or the middleware's) dropped when a previous summary is folded in.
_HEADER_LINE = re.compile(r"^Summary of (?:the )?earlier conversation\b.*:$", re.IGNORECASE)
_REF_TEXT = re.compile(r"\b(?:kb|doc_id|chunk_id|file_id):[^\s,\])]+|https?://[^\s,\"'<>)\]]+")


def _collect_refs(value: Any, tool: str, out: list[str]) -> None:
    """Ids and URLs found anywhere in a parsed tool result, in document order."""
    if isinstance(value, dict):
        metadata = value.get("metadata")
        for key in _REF_KEYS:
            ident = value.get(key)
            if ident is None and isinstance(metadata, dict):
                ident = metadata.get(key)
            if isinstance(ident, (str, int)) and str(ident):
                prefix = "kb" if (tool == KB_TOOL_NAME and key == "id") else key
                out.append(f"{prefix}:{ident}")
        for child in value.values():
            _collect_refs(child, tool, out)
    elif isinstance(value, list):
        for child in value:
            _collect_refs(child, tool, out)
    elif isinstance(value, str):
        out.extend(_urls(value))


def _tool_result_refs(message: ToolMessage, tool: str) -> list[str]:
    content = message_text(message)
    refs: list[str] = []
    try:
        _collect_refs(json.loads(content), tool, refs)
    except (TypeError, ValueError):
        refs.extend(f"kb:{i}" for i in _preview_ids(content) if tool == KB_TOOL_NAME)
        refs.extend(_urls(content))
    return refs


class ExtractiveSummarizer:
    """Deterministic summary: first sentences of turns, tool calls made, ids/URLs cited.

    Bounded by ``max_tokens``: the (bounded) previous summary and the references come first,
    then the first user turn (the goal) and as many of the most recent lines as fit; older
    lines are dropped with a marker. References of a previous summary are carried over.
    """

    #: First line of the summary; empty by default because the summary middleware wraps the text
    #: in its own header.
    header: str = ""
    #: Share of ``max_tokens`` a folded-in previous summary may use.
    previous_share: float = 0.4

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        return self.summarize(messages, previous_summary=previous_summary, max_tokens=max_tokens)

    def summarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        lines, refs = self._lines(messages)
        head = [self.header] if self.header else []
        if previous_summary and previous_summary.strip():
            # Old references survive even when the folded text itself gets cut.
            carried = [r.rstrip(".,;:!?") for r in _REF_TEXT.findall(previous_summary)]
            refs = _dedupe([*carried, *refs])
            kept_lines = [
                line
                for line in previous_summary.splitlines()
                if not _HEADER_LINE.match(line.strip()) and not line.startswith(_REFS_PREFIX)
            ]
            folded = " ".join(" ".join(kept_lines).split())
            if folded:
                budget = max(1, int(max_tokens * self.previous_share))
                head.append("Earlier: " + truncate_to_tokens(folded, budget))
        if refs:
            head.append(_REFS_PREFIX + ", ".join(refs))
        return self._fit(head, lines, max_tokens)

    @staticmethod
    def _lines(messages: Sequence[BaseMessage]) -> tuple[list[str], list[str]]:
        lines: list[str] = []
        refs: list[str] = []
        call_names: dict[str, str] = {}
        for message in messages:
            text = message_text(message)
            if isinstance(message, HumanMessage):
                sentence = _first_sentence(text)
                if sentence:
                    lines.append(f"- User: {sentence}")
            elif isinstance(message, AIMessage):
                sentence = _first_sentence(text)
                if sentence:
                    lines.append(f"- Assistant: {sentence}")
                refs.extend(f"kb:{i}" for i in _KB_CITE.findall(text))
                refs.extend(_urls(text))
                for call in message.tool_calls:
                    if call.get("id"):
                        call_names[str(call["id"])] = call["name"]
                    args = ", ".join(f"{k}={_short(v)}" for k, v in list(call["args"].items())[:4])
                    lines.append(f"- Tool call: {call['name']}({args})")
            elif isinstance(message, ToolMessage):
                tool = message.name or call_names.get(message.tool_call_id, "")
                refs.extend(_tool_result_refs(message, tool))
            elif isinstance(message, SystemMessage):
                continue
        return lines, _dedupe(refs)

    @staticmethod
    def _fit(head: list[str], lines: list[str], max_tokens: int) -> str:
        def render(body: list[str]) -> str:
            return "\n".join([*head, *body])

        text = render(lines)
        if count_tokens(text) <= max_tokens:
            return text
        # Keep the first user line (the goal) and the most recent lines that fit.
        first, rest = (lines[:1], lines[1:]) if lines else ([], [])
        kept: list[str] = []
        for line in reversed(rest):
            dropped = len(rest) - len(kept) - 1
            candidate = [*first, f"- ({dropped} earlier lines omitted)", line, *kept]
            if count_tokens(render(candidate)) > max_tokens:
                break
            kept.insert(0, line)
        omitted = len(rest) - len(kept)
        body = [*first, *([f"- ({omitted} earlier lines omitted)"] if omitted else []), *kept]
        return truncate_to_tokens(render(body), max_tokens)
