"""Streamed chat-completion chunks that arrived together, merged where they only extend the text
or one tool call's arguments.

Why: every chunk a provider streams costs the service a fixed amount of CPU on its way to the
client (a message chunk built, callbacks, LangGraph's message stream, the run's deltas), however
short its text: providers stream a token or two per chunk. Chunks that one read of the response
brought together are due at the same moment anyway; merged, they cost one chunk's overhead. The
busier the service, the later it reads and the more it merges, so the overhead per turn falls
when CPU is short. Nothing changes in what a client reads: the same text in the same order, in
fewer, longer deltas (a provider's chunking is arbitrary already).

A chunk is merged into the one before it only when both are plain deltas of the one choice (no
finish reason, usage or log-probabilities, the same id, model and fingerprint) and the later one
adds text to text, starts the tool calls of a delta that holds nothing yet, or adds arguments to
the same tool call (no other role, call id or name). Anything
else (a finish, a usage chunk, a second tool call, text after a tool call) stays a chunk of its
own, in order.

Reads can also be paced: once a stream shows output, the reader may wait a moment before reading
on (``gather_next``; ``THREADKEEPER_LLM_STREAM_GATHER_SECONDS``), so that what the provider sent
meanwhile comes in one read and merges. A provider streaming a token every 10-20 ms then costs
a chunk per pause instead of a chunk per token, for at most that pause of delay per piece; the
first output and the end of the stream are read as they come.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

#: Top-level fields a chunk may differ in and still merge: OpenAI's random padding per chunk
#: (``stream_options.include_obfuscation``), which carries no data.
_VOLATILE = frozenset({"obfuscation"})


def coalesce(chunks: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``chunks`` (decoded chunk objects, consumed in order) with mergeable neighbours merged
    into the earlier one (which is changed in place)."""
    held: dict[str, Any] | None = None
    for chunk in chunks:
        if held is not None and merge_into(held, chunk):
            continue
        if held is not None:
            yield held
        held = chunk
    if held is not None:
        yield held


def merge_into(into: dict[str, Any], later: dict[str, Any]) -> bool:
    """Append ``later``'s delta to ``into``'s when both are mergeable (see the module); whether
    it was."""
    first, second = _plain_choice(into), _plain_choice(later)
    if first is None or second is None or not _same_envelope(into, later):
        return False
    if first.keys() != second.keys() or first.get("index") != second.get("index"):
        return False
    a, b = first.get("delta"), second.get("delta")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    return _extend_text(a, b) or _start_call(a, b) or _extend_arguments(a, b)


def _plain_choice(chunk: dict[str, Any]) -> dict[str, Any] | None:
    """The chunk's one choice when it is a plain delta (no finish, log-probabilities or usage)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or chunk.get("usage") is not None:
        return None
    choice = choices[0]
    if not isinstance(choice, dict):
        return None
    if choice.get("finish_reason") is not None or choice.get("logprobs") is not None:
        return None
    return choice


def _same_envelope(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = (a.keys() | b.keys()) - _VOLATILE - {"choices"}
    return all(a.get(key) == b.get(key) for key in keys)


def _extend_text(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """``b`` only adds text to a delta without tool calls."""
    text = b.get("content")
    if not isinstance(text, str) or not _adds_nothing(b, a, "content") or a.get("tool_calls"):
        return False
    if a.get("function_call") or not isinstance(a.get("content") or "", str):
        return False
    a["content"] = (a.get("content") or "") + text
    return True


def _start_call(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """``b`` starts the tool calls of a delta that holds nothing yet (the role's first chunk)."""
    calls = b.get("tool_calls")
    if not isinstance(calls, list) or not calls or not _adds_nothing(b, a, "tool_calls"):
        return False
    if a.get("tool_calls") or a.get("content") or a.get("function_call"):
        return False
    a["tool_calls"] = calls
    return True


def _extend_arguments(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """``b`` only adds arguments to the one tool call ``a`` streams (same index, no id or name)."""
    if not _adds_nothing(b, a, "tool_calls") or a.get("content") or a.get("function_call"):
        return False
    calls_a, calls_b = a.get("tool_calls"), b.get("tool_calls")
    if not (isinstance(calls_a, list) and isinstance(calls_b, list)):
        return False
    if len(calls_a) != 1 or len(calls_b) != 1:
        return False
    call_a, call_b = calls_a[0], calls_b[0]
    if not (isinstance(call_a, dict) and isinstance(call_b, dict)):
        return False
    if call_b.get("index") != call_a.get("index") or not _adds_nothing(call_b, call_a, "function"):
        return False
    fn_a, fn_b = call_a.get("function"), call_b.get("function")
    if not (isinstance(fn_a, dict) and isinstance(fn_b, dict)):
        return False
    if not _adds_nothing(fn_b, fn_a, "arguments"):
        return False
    more = fn_b.get("arguments")
    if not isinstance(more, str) or not isinstance(fn_a.get("arguments") or "", str):
        return False
    fn_a["arguments"] = (fn_a.get("arguments") or "") + more
    return True


def _adds_nothing(later: dict[str, Any], earlier: dict[str, Any], *keys: str) -> bool:
    """Every field of ``later`` besides ``keys`` is empty (None, "" or []) or repeats
    ``earlier``'s (providers that send the role, or a call's type, with every chunk)."""
    return all(
        value in (None, "", []) or earlier.get(key) == value
        for key, value in later.items()
        if key not in keys
    )


def carries_output(chunk: dict[str, Any]) -> bool:
    """Whether ``chunk`` streams something a client shows: text, a refusal or a tool call."""
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and any(
            delta.get(k) for k in ("content", "refusal", "tool_calls")
        ):
            return True
    return False


def ends(chunk: dict[str, Any]) -> bool:
    """Whether ``chunk`` finishes the stream: a finish reason, or the usage that comes last."""
    if chunk.get("usage") is not None:
        return True
    choices = chunk.get("choices") or ()
    return any(isinstance(c, dict) and c.get("finish_reason") is not None for c in choices)


def gather_next(chunks: list[dict[str, Any]], only_chunks: bool, started: bool) -> bool:
    """Whether to let the next pieces gather before reading on, after a read that brought
    ``chunks`` (``only_chunks``: nothing else, such as ``[DONE]``) once the stream ``started``
    to stream output: never before the first output (the time to first token stays the
    provider's) nor once the stream ends (its end is read at once)."""
    return started and only_chunks and not any(map(ends, chunks))
