"""The offline, deterministic default chat model.

Why: Threadkeeper must run (and be tested end to end) with no LLM endpoint. This model does not
pretend to be a language model: it *extracts*. It asks ``query_kb`` for every user turn and
answers with the most relevant sentences of the results, citing ``[kb:<id>]``. Same input, same
output, always. Its summarizing counterpart is ``ExtractiveSummarizer``
(``app.compression.summarizers``).
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

from app.compression.message_memo import MessageMemo
from app.compression.messages import marker, message_text, offload_info
from app.compression.retrieval import read_results
from app.compression.terms import terms as _terms
from app.compression.tokens import count_tokens, count_tokens_cached
from app.compression.tool_names import QUERY_KB, SEARCH_WORKDIR
from app.offline.extracts import dedupe, first_sentence, preview_ids, sentences, short

__all__ = ["ExtractiveChatModel"]

MODEL_NAME = "extractive"
#: The offline model streams phrases of at least this many characters (cut after whitespace),
#: not words: each chunk costs a callback and a stream item (~30 us of CPU), and the worker
#: coalesces deltas to ``delta_flush_chars`` (2,000 by default) before anyone sees them.
DELTA_CHARS = 48


def text_pieces(text: str, min_chars: int = DELTA_CHARS) -> list[str]:
    """``text`` cut after whitespace into pieces of at least ``min_chars`` (the last may be
    shorter); joined they are ``text``."""
    pieces: list[str] = []
    start = 0
    for gap in re.finditer(r"\s+", text):
        if gap.end() - start >= min_chars:
            pieces.append(text[start : gap.end()])
            start = gap.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def _message_tokens(message: BaseMessage) -> int:
    total = count_tokens_cached(message_text(message))
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            total += count_tokens(call["name"]) + count_tokens_cached(json.dumps(call["args"]))
    return total


#: The reply's usage counts the whole view on every call: each message is counted once per
#: message object (and once per text), not on every call.
_view_tokens = MessageMemo(_message_tokens)


def _messages_tokens(messages: Sequence[BaseMessage]) -> int:
    return sum(_view_tokens(message) for message in messages)


# --------------------------------------------------------------------------- kb results
@dataclass(frozen=True)
class _Result:
    ident: str | None
    content: str
    score: float
    title: str = ""
    url: str = ""


def _parse_results(content: str) -> list[_Result] | None:
    """The results of a tool output, read by the one retrieval reader (our own ``query_kb``
    rows, Milvus/Dify-style chunks, Tavily-style results); None when the content is not a
    result list (e.g. a preview)."""
    parsed = read_results(content)
    if parsed is None:
        return None
    return [
        _Result(
            ident=item.ident,
            content=item.text,
            score=item.relevance or 0.0,
            title=item.title or "",
            url=item.url or "",
        )
        for item in parsed.items
    ]


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
        for sentence in sentences(result.content):
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
    kb_tool_name: str = QUERY_KB

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
                    SEARCH_WORKDIR in tool_names
                    and tool_choice != "none"
                    and _holds_offloads(messages)
                )
                if can_search and not _kb_answers(last, question):
                    call = {
                        "name": SEARCH_WORKDIR,
                        "args": {"query": self._question(messages, None), "limit": 3},
                        "id": _call_id(f"search\x00{question}", len(messages)),
                        "type": "tool_call",
                    }
                    return self._message("", [call], messages)
                return self._message(self._answer_from_kb(last, messages), [], messages)
            if tool_name == SEARCH_WORKDIR:
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
        """The last user turn, plus the query the tool was called with when it differs (the
        offline model looks the turn itself up: quoted twice, the answer repeated it)."""
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
        return " ".join(dedupe([" ".join(p.split()) for p in parts]))

    def _answer_from_kb(self, message: ToolMessage, messages: Sequence[BaseMessage]) -> str:
        question = self._question(messages, message)
        content = message_text(message)
        if message.status == "error":
            reason = first_sentence(content) or "unknown error"
            return f"The knowledge base lookup failed: {reason}"
        results = _parse_results(content)
        if results is None:
            return self._answer_from_preview(content, question)
        results = [r for r in results if r.content.strip()]
        if not results:
            return f'I found nothing relevant in the knowledge base for "{short(question)}".'
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
                f'tool results for "{short(question)}".'
            )
        cited = " ".join(f"{c.sentence} {where[c.ident or '']}" for c in picked)
        return f"From this thread's earlier tool results: {cited}"

    def _answer_from_preview(self, content: str, question: str) -> str:
        """A shortened (offloaded) or non-JSON result: quote it and name the ids it mentions."""
        picked = _best_sentences([_Result(None, content, 0.0)], question, self.max_answer_sentences)
        if not picked:
            return f'I found nothing relevant in the knowledge base for "{short(question)}".'
        text = " ".join(c.sentence for c in picked)
        ids = dedupe(preview_ids(content))[:10]
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
                f'conversation matches "{short(question)}".'
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
        """Phrase-sized text deltas, one tool-call chunk per call, then usage on the last chunk."""
        for piece in text_pieces(message.text):
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
