"""The run worker: claims queued input FIFO per idle thread, runs the graph under a lease.

In-process by default (started in the app lifespan); ``python -m app worker`` runs it apart.
Mutual exclusion comes from the Conversation row lock taken at claim time plus the partial unique
index "one running/interrupted run per thread" — never from LangGraph, which has no thread lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import socket
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command
from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app import metrics
from app.agents.context import AgentContext
from app.agents.graph import AgentRuntime
from app.agents.messages import message_text
from app.agents.middlewares.boundary import (
    NOT_APPROVED,
    RESULT_UNKNOWN,
    dangling_tool_calls,
    unanswered_result,
)
from app.agents.storable import storable_message, storable_text, storable_value
from app.agents.summary_messages import is_summary_message
from app.agents.tokens import run_usage
from app.config import Settings
from app.db.errors import is_connection_error
from app.db.models import RequestStatus, RunStatus
from app.heartbeat import write_beat
from app.repositories.agent_state import AgentStateRepository, committed_state
from app.repositories.conversations import ConversationRepository
from app.repositories.messages import MessageRepository, NewMessage
from app.repositories.runs import RunEventRepository, RunRepository, RunRequestRepository
from app.services.run_errors import (
    CANCELLED,
    LEASE_EXPIRED,
    WORKER_STOPPED,
    RunError,
    classify_run_error,
    error_log_fields,
)

log = structlog.get_logger(__name__)

#: Event rows deleted per pruning transaction (keeps each one short).
PRUNE_BATCH = 5000


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    run_id: uuid.UUID
    conversation_id: uuid.UUID
    owner_id: str
    graph_input: Any


def _json_safe(value: Any) -> Any:
    """Plain JSON values PostgreSQL can store (``json`` round-trips a lone surrogate as one)."""
    return storable_value(json.loads(json.dumps(value, default=str)))


def _storable_id(value: str | None) -> str | None:
    """Ids and names come from the provider too (a tool call's id, a completion id)."""
    return None if value is None else storable_text(value)


def repair_content(live: Any) -> str:
    """Why a dangling tool call has no result: it waited for approval when its run was
    cancelled (the tool never ran), or its run ended with the tool running or done but its
    result not recorded (``kill -9``, a lost lease): then the tool may have run."""
    return NOT_APPROVED if live.interrupts else RESULT_UNKNOWN


def _recovered_result(result: ToolMessage, call_id: str) -> ToolMessage:
    """A finished tool's saved result, with the one id every repair of this call uses."""
    return storable_message(result).model_copy(update={"id": f"repair-{call_id}"})


#: Times a run that lost its database connection goes on from its last checkpoint.
DATABASE_RETRIES = 3


def interrupt_payload(interrupts: Any) -> Any:
    """The stored/streamed form of pending LangGraph interrupts (one, or a list)."""
    values = [getattr(i, "value", i) for i in interrupts]
    return _json_safe(values[0] if len(values) == 1 else values)


class LeaseLost(Exception):
    """This worker no longer holds the run (recovered elsewhere, or cancelled)."""


class HandedOff(Exception):
    """The worker is draining: the run stopped at a step boundary and goes to another worker."""


#: ``resume_payload`` key of a run released by a draining worker (running, no lease holder).
HANDOFF_KEY = "threadkeeper_handoff"


@dataclass(frozen=True, slots=True)
class Handoff:
    """Graph input of a released run: continue from its last checkpoint.

    ``human`` is the run's user message when the run started from one: if the release came
    before that input reached the checkpoint, the run starts over from it instead.
    """

    human: HumanMessage | None


def _human_of(graph_input: Any) -> HumanMessage | None:
    if isinstance(graph_input, Handoff):
        return graph_input.human
    if isinstance(graph_input, dict):
        found = [m for m in graph_input.get("messages", []) if isinstance(m, HumanMessage)]
        return found[0] if found else None
    return None


class DeltaBuffer:
    """Coalesces streamed tokens into few ``delta`` events: one row per ``interval`` seconds or
    ``max_chars`` characters (and at each step's end), not one per token."""

    def __init__(self, interval: float = 0.2, max_chars: int = 2000) -> None:
        self.interval = interval
        self.max_chars = max_chars
        self._parts: dict[str | None, list[str]] = {}
        self._chars = 0
        self._since = time.monotonic()

    def add(self, lc_id: str | None, text: str) -> None:
        if text:
            self._parts.setdefault(lc_id, []).append(text)
            self._chars += len(text)

    def due(self) -> bool:
        return bool(self._parts) and (
            self._chars >= self.max_chars or time.monotonic() - self._since >= self.interval
        )

    def drain(self) -> list[tuple[str | None, str]]:
        out = [(k, "".join(v)) for k, v in self._parts.items()]
        self._parts.clear()
        self._chars = 0
        self._since = time.monotonic()
        return out


class RunWorker:
    def __init__(
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        runtime: AgentRuntime,
        holder: str | None = None,
        max_concurrent_runs: int = 4,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.runtime = runtime
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._runs: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(max_concurrent_runs)
        self._stopping = False
        #: Runs waiting for the database to answer again before they go on (observability).
        self.waiting_for_database: set[uuid.UUID] = set()
        #: Set when a draining worker's grace period is over: runs stop at the next step.
        self._handoff = asyncio.Event()
        #: Touched by the claim loop (standalone worker): ``python -m app worker --check``.
        self.heartbeat_file: Path | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._stopping = False
        self._handoff.clear()
        self._loop_task = asyncio.create_task(self._loop(), name="run-worker")

    async def stop(self) -> None:
        """Stop now: in-flight runs are released (see ``drain``) without a grace period."""
        await self.drain(0)

    async def drain(self, seconds: float) -> None:
        """Graceful stop (SIGTERM): claim nothing more, let running turns finish within
        ``seconds``, then stop the rest at a step boundary (waiting at most ``seconds`` more)
        and release them, so another worker continues from the last checkpoint: a step whose
        result is already checkpointed (a tool that ran) is never executed again."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop_task
        running = [t for t in self._runs.values() if not t.done()]
        if running and seconds > 0:
            log.info("worker_draining", runs=len(running), seconds=seconds)
            await asyncio.wait(running, timeout=seconds)
        running = [t for t in running if not t.done()]
        if running:
            log.info("worker_handing_off", runs=len(running))
            self._handoff.set()
            if seconds > 0:
                await asyncio.wait(running, timeout=seconds)
        for t in running:
            t.cancel()  # no step boundary in time: released all the same, that step redone
        for t in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    def wake(self) -> None:
        self._wake.set()

    def cancel_local(self, run_id: uuid.UUID) -> None:
        task = self._runs.get(run_id)
        if task is not None:
            task.cancel()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        recovered_at = pruned_at = -math.inf
        while not self._stopping:
            # Cleared before the claim round, not after it: a wake-up arriving while this round
            # runs (a commit its query could not see yet) must make the wait below return at
            # once instead of being erased (a lost wake-up cost a full poll interval).
            self._wake.clear()
            try:
                # Housekeeping on its own clock: an intake wake (hundreds per second under load)
                # must cost nothing while every slot is busy, not a recovery transaction each.
                now = loop.time()
                if now - recovered_at >= self.settings.worker_poll_seconds:
                    recovered_at = now
                    await self.recover_expired()
                if now - pruned_at >= self.prune_interval():
                    pruned_at = now
                    await self.prune_run_events()
                while not self._stopping and await self._claim_and_spawn():
                    pass
                await self._beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("worker_loop_error", error=repr(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.worker_poll_seconds)

    async def _beat(self) -> None:
        """Record that the claim loop just went round with a working database."""
        if self.heartbeat_file is None:
            return
        beat = {"holder": self.holder, "pid": os.getpid(), "at": time.time()}
        await asyncio.to_thread(write_beat, self.heartbeat_file, json.dumps(beat))

    def prune_interval(self) -> float:
        """How often finished runs' events are pruned: a tenth of the retention, 1 s to 5 min."""
        retention = self.settings.run_events_retention_seconds
        return math.inf if retention <= 0 else min(max(retention / 10, 1.0), 300.0)

    async def prune_run_events(self) -> int:
        """Delete the events of runs finished more than the retention period ago (in batches,
        each its own short transaction); returns how many rows went."""
        retention = self.settings.run_events_retention_seconds
        if retention <= 0:
            return 0
        total = 0
        while True:
            async with self.sessions() as session, session.begin():
                deleted = await RunEventRepository(session).prune_finished(
                    older_than_seconds=retention, limit=PRUNE_BATCH
                )
            total += deleted
            if deleted < PRUNE_BATCH:
                break
        if total:
            log.info("run_events_pruned", rows=total)
        return total

    async def _claim_and_spawn(self) -> bool:
        if self._slots.locked():
            return False
        claimed = await self.claim_resumable() or await self.claim_next()
        if claimed is None:
            return False
        await self._slots.acquire()
        task = asyncio.create_task(self._execute(claimed), name=f"run-{claimed.run_id}")
        self._runs[claimed.run_id] = task

        def _done(_: asyncio.Task[None], run_id: uuid.UUID = claimed.run_id) -> None:
            self._runs.pop(run_id, None)
            self._slots.release()
            self._wake.set()

        task.add_done_callback(_done)
        return True

    async def claim_next(self) -> ClaimedRun | None:
        """Oldest queued input of an idle thread -> a running run, in one transaction."""
        try:
            async with self.sessions() as session, session.begin():
                requests = RunRequestRepository(session)
                conv_id = await requests.claimable_conversation()
                if conv_id is None:
                    return None
                conv = await ConversationRepository(session).get(conv_id)
                request = await requests.oldest_queued(conv_id)
                if conv is None or request is None:
                    return None
                await requests.mark(request.id, RequestStatus.DISPATCHED)
                run = await RunRepository(session).start(
                    conversation_id=conv_id,
                    request_id=request.id,
                    holder=self.holder,
                    lease_seconds=self.settings.lease_seconds,
                )
                await RunEventRepository(session).append(
                    run.id, "status", {"status": "running", "request_id": str(request.id)}
                )
                payload = request.payload
                human = HumanMessage(content=payload["content"], id=payload["lc_id"])
                return ClaimedRun(
                    run_id=run.id,
                    conversation_id=conv_id,
                    owner_id=conv.owner_id,
                    graph_input={"messages": [human]},
                )
        except IntegrityError:
            # Another worker started a run on this thread between our snapshot and our insert.
            log.info("claim_lost_race")
            return None

    async def claim_resumable(self) -> ClaimedRun | None:
        async with self.sessions() as session, session.begin():
            runs = RunRepository(session)
            run = await runs.claim_resumable(self.holder, self.settings.lease_seconds)
            if run is None:
                return None
            conv = await ConversationRepository(session).get(run.conversation_id)
            assert conv is not None
            payload = run.resume_payload
            await runs.set_fields(run.id, resume_payload=None)
            await RunEventRepository(session).append(run.id, "status", {"status": "running"})
            graph_input: Any = Command(resume=payload)
            if isinstance(payload, dict) and HANDOFF_KEY in payload:
                human = payload[HANDOFF_KEY].get("human")
                graph_input = Handoff(
                    HumanMessage(content=human["content"], id=human["lc_id"]) if human else None
                )
                log.info("run_taken_over", run_id=str(run.id), holder=self.holder)
            return ClaimedRun(
                run_id=run.id,
                conversation_id=run.conversation_id,
                owner_id=conv.owner_id,
                graph_input=graph_input,
            )

    async def recover_expired(self) -> int:
        """Runs whose worker vanished: fail them (their input is not replayed: tools may have run)."""
        async with self.sessions() as session, session.begin():
            runs = RunRepository(session)
            expired = await runs.expired()
            for run in expired:
                await runs.set_fields(
                    run.id,
                    status=RunStatus.FAILED,
                    error=LEASE_EXPIRED.message,
                    error_code=LEASE_EXPIRED.code,
                    lease_holder=None,
                    finished_at=func.now(),
                )
                await RunEventRepository(session).append(
                    run.id,
                    "status",
                    {
                        "status": "failed",
                        "error": LEASE_EXPIRED.message,
                        "error_code": LEASE_EXPIRED.code,
                        "final": True,
                    },
                )
                log.warning("run_lease_recovered", run_id=str(run.id))
                metrics.LEASE_RECOVERIES.inc()
                metrics.record_run_finished(RunStatus.FAILED)
            return len(expired)

    # --- execution ----------------------------------------------------------------------------
    async def _execute(self, claimed: ClaimedRun) -> None:
        bound = log.bind(run_id=str(claimed.run_id), thread_id=str(claimed.conversation_id))
        heartbeat = asyncio.create_task(self._heartbeat(claimed.run_id))
        runner = asyncio.create_task(self._run_graph(claimed))
        try:
            done, _ = await asyncio.wait({heartbeat, runner}, return_when=asyncio.FIRST_COMPLETED)
            if heartbeat in done and not runner.done():
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner
                await self._finish_cancelled_or_lost(claimed)
                return
            status, error, interrupt = runner.result()
            await self._finish(claimed, status, error, interrupt)
            bound.info("run_finished", status=status.value)
        except asyncio.CancelledError:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
            await asyncio.shield(self._finish_cancelled_or_lost(claimed))
            raise
        except HandedOff:
            await self._release(claimed)
            bound.info("run_released")
        except LeaseLost:
            bound.warning("run_lease_lost")  # recovered elsewhere: the outcome is theirs to write
        except Exception as exc:
            bound.error("run_crashed", **error_log_fields(exc))
            await self._finish(claimed, RunStatus.FAILED, classify_run_error(exc), None)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await heartbeat

    async def _heartbeat(self, run_id: uuid.UUID) -> None:
        """Returns (ending the run) when the lease is lost or a cancel was requested.

        A failed renewal (connection reset, pool busy, database restart) is retried until the
        lease would have run out; only then is the run given up, since another worker may by
        then have recovered it.
        """
        loop = asyncio.get_running_loop()
        renewed_at = loop.time()
        while True:
            await asyncio.sleep(self.settings.heartbeat_seconds)
            try:
                async with self.sessions() as session, session.begin():
                    alive = await RunRepository(session).heartbeat(
                        run_id, self.holder, self.settings.lease_seconds
                    )
            except Exception as exc:
                if loop.time() - renewed_at >= self.settings.lease_seconds:
                    log.error("heartbeat_gave_up", run_id=str(run_id), error=type(exc).__name__)
                    return
                log.warning("heartbeat_failed", run_id=str(run_id), error=type(exc).__name__)
                continue
            if not alive:
                return
            renewed_at = loop.time()

    async def _run_graph(
        self, claimed: ClaimedRun
    ) -> tuple[RunStatus, RunError | None, dict[str, Any] | None]:
        config = self.runtime.config_for(claimed.conversation_id)
        graph_input = claimed.graph_input
        if isinstance(graph_input, Handoff):
            graph_input = await self._takeover_input(graph_input, config)
        waiting: frozenset[str] = frozenset()
        if isinstance(graph_input, dict):
            await self._repair_dangling_tool_calls(claimed, config)
        elif isinstance(graph_input, Command):
            waiting = await self._pending_interrupt_ids(config)
        retries = 0
        while True:
            try:
                interrupt = await self._stream_run(claimed, graph_input, config)
                break
            except (LeaseLost, HandedOff):
                raise
            except Exception as exc:
                failure: BaseException = exc
                if retries < DATABASE_RETRIES and is_connection_error(exc):
                    retries += 1
                    log.warning(
                        "run_database_lost",
                        run_id=str(claimed.run_id),
                        retry=retries,
                        error=type(exc).__name__,
                    )
                    try:
                        again, graph_input, interrupt = await self._resume_point(
                            claimed, config, waiting
                        )
                    except LeaseLost:
                        raise
                    except Exception as still:
                        failure = still
                    else:
                        if again:
                            continue
                        break
                error = classify_run_error(failure)
                log.warning(
                    "run_failed",
                    run_id=str(claimed.run_id),
                    error_code=error.code,
                    **error_log_fields(failure),
                )
                return RunStatus.FAILED, error, None
        if retries:
            # A step that finished before the outage but whose checkpoint was not yet written is
            # applied from LangGraph's saved task writes on the retry, without streaming its
            # update again: take anything still missing from the history from the final state
            # (idempotent on message ids).
            snapshot = await self.runtime.graph.aget_state(config)
            view = list((snapshot.values or {}).get("messages", []))
            await self._persist_update(claimed, {"messages": view})
        if interrupt is not None:
            return RunStatus.INTERRUPTED, None, interrupt
        await self._prune_checkpoints(claimed.conversation_id, claimed.run_id)
        return RunStatus.COMPLETED, None, None

    async def _stream_run(
        self, claimed: ClaimedRun, graph_input: Any, config: RunnableConfig
    ) -> dict[str, Any] | None:
        """Stream the graph, persisting messages and events; the pending interrupt, if any."""
        context = AgentContext(owner_id=claimed.owner_id, thread_id=str(claimed.conversation_id))
        interrupt: dict[str, Any] | None = None
        deltas = DeltaBuffer(
            self.settings.delta_flush_ms / 1000, max_chars=self.settings.delta_flush_chars
        )
        stream = self._stream(self.runtime.graph, graph_input, config, context)
        async for mode, chunk in stream:
            if mode == "messages":
                message, meta = chunk
                if isinstance(message, AIMessageChunk) and meta.get("langgraph_node") == "model":
                    deltas.add(message.id, message_text(message))
                if deltas.due():
                    await self._flush_deltas(claimed.run_id, deltas)
                continue
            await self._flush_deltas(claimed.run_id, deltas)
            if mode == "custom":
                if isinstance(chunk, dict) and chunk.get("type"):
                    await self._event(claimed.run_id, str(chunk["type"]), chunk)
                continue
            for node, update in (chunk or {}).items():
                if node == "__interrupt__":
                    interrupt = interrupt_payload(update)
                    continue
                await self._persist_update(claimed, update)
            if self._handoff.is_set() and mode == "updates":
                # A step just ended: stop here, and stop the graph's next step now (closing
                # the stream) rather than whenever the dropped generator is collected.
                await stream.aclose()
                raise HandedOff(str(claimed.run_id))
        return interrupt

    async def _pending_interrupt_ids(self, config: RunnableConfig) -> frozenset[str]:
        snapshot = await self.runtime.graph.aget_state(config)
        return frozenset(str(i.id) for i in snapshot.interrupts)

    async def _resume_point(
        self, claimed: ClaimedRun, config: RunnableConfig, waiting: frozenset[str]
    ) -> tuple[bool, Any, dict[str, Any] | None]:
        """After a lost connection: where the run goes on, from the last saved checkpoint.

        Returns ``(again, graph_input, interrupt)``. Messages the graph produced but the outage
        kept out of the history are stored first (idempotent on their ids). Steps whose
        checkpoint was not written run again (LangGraph keeps the writes of finished tasks).
        """
        snapshot = await self._wait_for_database(claimed.run_id, config)
        committed = await committed_state(self.runtime.graph, snapshot)
        view = list((snapshot.values or {}).get("messages", []))
        await self._persist_update(claimed, {"messages": view})
        pending = snapshot.interrupts
        if isinstance(claimed.graph_input, Command):
            if pending and {str(i.id) for i in pending} == waiting:
                return True, claimed.graph_input, None  # the answer was not consumed yet
        else:
            human = _human_of(claimed.graph_input)
            if human is not None and not any(m.id == human.id for m in view):
                return True, {"messages": [human]}, None  # the input itself was never saved
        if pending:
            return False, None, interrupt_payload(pending)  # reached a new interrupt
        if committed.next:
            # Go on from the last checkpoint: its step runs again, except the tasks whose writes
            # were saved (LangGraph applies those). The live view would call such a step done
            # (a model reply with tool calls and no checkpoint after it), and restarting the
            # graph on it would send the provider the calls without their results.
            return True, None, None
        last = view[-1] if view else None
        if not (isinstance(last, AIMessage) and not last.tool_calls):
            # The checkpoint says "done" but the turn has no final answer (the outage ended the
            # graph after a tool step): start the graph again on the saved messages, every
            # tool call in them answered first.
            await self._repair_dangling_tool_calls(claimed, config)
            return True, {"messages": []}, None
        return False, None, None  # the graph had finished

    async def _wait_for_database(self, run_id: uuid.UUID, config: RunnableConfig) -> Any:
        """The thread's state snapshot once both pools answer again (and the lease is still
        ours); re-raises the connection error after ``lease_seconds`` of waiting."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.lease_seconds
        delay = 0.1
        self.waiting_for_database.add(run_id)
        try:
            while True:
                try:
                    async with self.sessions() as session, session.begin():
                        await self._assert_lease(session, run_id)
                    return await self.runtime.graph.aget_state(config)
                except LeaseLost:
                    raise
                except Exception as exc:
                    if not is_connection_error(exc) or loop.time() >= deadline:
                        raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        finally:
            self.waiting_for_database.discard(run_id)

    async def _takeover_input(self, handoff: Handoff, config: RunnableConfig) -> Any:
        """Continue from the checkpoint (``None``), unless the run's own input never got there."""
        if handoff.human is None:
            return None
        state = await self.runtime.graph.aget_state(config)
        ids = {m.id for m in (state.values or {}).get("messages", [])}
        return None if handoff.human.id in ids else {"messages": [handoff.human]}

    async def _release(self, claimed: ClaimedRun) -> None:
        """Hand a running run back (no lease holder) for another worker to continue."""
        human = _human_of(claimed.graph_input)
        marker = {
            HANDOFF_KEY: {
                "holder": self.holder,
                "human": {"content": human.content, "lc_id": human.id} if human else None,
            }
        }
        async with self.sessions() as session, session.begin():
            runs = RunRepository(session)
            run = await runs.lock(claimed.run_id)
            if run is None or run.status != RunStatus.RUNNING or run.lease_holder != self.holder:
                return
            if run.cancel_requested:
                await _end_stopped(session, claimed.run_id, cancelled=True)
                return
            await runs.set_fields(
                claimed.run_id,
                lease_holder=None,
                lease_expires_at=None,
                resume_payload=_json_safe(marker),
            )
            await RunEventRepository(session).append(
                claimed.run_id, "status", {"status": "running", "handoff": True}
            )

    async def _prune_checkpoints(self, conversation_id: uuid.UUID, run_id: uuid.UUID) -> None:
        """Each step stores a full copy of the state; keep only the latest once the turn is done.

        Runs while this run is still active, so no other run or compression touches the thread.
        """
        try:
            async with self.sessions() as session, session.begin():
                await self._assert_lease(session, run_id)
            await AgentStateRepository(self.runtime.graph).prune_history(conversation_id)
        except LeaseLost:
            raise
        except Exception as exc:  # housekeeping must never fail the turn
            log.warning("checkpoint_prune_failed", thread_id=str(conversation_id), error=repr(exc))

    async def _stream(
        self, graph: Any, graph_input: Any, config: RunnableConfig, context: AgentContext
    ) -> AsyncGenerator[tuple[str, Any], None]:
        async for item in graph.astream(
            graph_input, config, context=context, stream_mode=["updates", "custom", "messages"]
        ):
            mode, chunk = item
            yield mode, chunk

    async def _flush_deltas(self, run_id: uuid.UUID, deltas: DeltaBuffer) -> None:
        """Everything buffered goes out in one transaction (one lease check, one NOTIFY)."""
        batch = [("delta", {"lc_id": lc_id, "text": text}) for lc_id, text in deltas.drain()]
        if batch:
            await self._events(run_id, batch)

    async def _repair_dangling_tool_calls(
        self, claimed: ClaimedRun, config: RunnableConfig
    ) -> None:
        """A run that ended between a tool call and its committed result leaves the history
        invalid for any provider: answer those calls before going on.

        Read from the committed checkpoint (new input would discard anything after it). A tool
        that did finish keeps its real result (saved as the pending write of its task);
        otherwise the answer says why there is none (``repair_content``).
        """
        live = await self.runtime.graph.aget_state(config)
        committed = await committed_state(self.runtime.graph, live)
        pending = dangling_tool_calls((committed.values or {}).get("messages", []))
        if not pending:
            return
        finished = {
            m.tool_call_id: m
            for m in (live.values or {}).get("messages", [])
            if isinstance(m, ToolMessage)
        }
        patch = [
            _recovered_result(finished[p["id"]], p["id"])
            if p["id"] in finished
            else unanswered_result(p, repair_content(live))
            for p in pending
        ]
        log.warning(
            "dangling_tool_calls_answered",
            run_id=str(claimed.run_id),
            recovered=sum(p["id"] in finished for p in pending),
            unknown=sum(p["id"] not in finished for p in pending),
        )
        # Full history first (idempotent on the ids), then the model view.
        async with self.sessions() as session, session.begin():
            await MessageRepository(session).append(
                claimed.conversation_id, [self._row(claimed.run_id, m) for m in patch]
            )
        await self.runtime.graph.aupdate_state(config, {"messages": patch}, as_node="tools")

    async def _persist_update(self, claimed: ClaimedRun, update: Any) -> None:
        updates = update if isinstance(update, list) else [update]
        new: list[BaseMessage] = []
        for u in updates:
            if not isinstance(u, dict):
                continue
            for m in u.get("messages") or []:
                if isinstance(m, RemoveMessage) or is_summary_message(m):
                    continue
                if isinstance(m, (AIMessage, ToolMessage)):
                    new.append(m)
        if not new:
            return
        rows = [self._row(claimed.run_id, m) for m in new]
        async with self.sessions() as session, session.begin():
            # Lock order everywhere: conversation, then run (cancel/resume do the same).
            await ConversationRepository(session).lock(
                claimed.conversation_id, timeout_ms=int(self.settings.lease_seconds * 1000)
            )
            await self._assert_lease(session, claimed.run_id)
            stored = await MessageRepository(session).append(claimed.conversation_id, rows)
            stored_ids = {s.lc_id for s in stored}
            # Usage is counted once per AI message actually stored (replays are skipped).
            fresh_ai = [m for m in new if isinstance(m, AIMessage) and m.id in stored_ids]
            if fresh_ai:
                usage = run_usage(fresh_ai)
                await RunRepository(session).add_usage(
                    claimed.run_id,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    calls=usage.calls,
                )
            if stored:
                await RunEventRepository(session).append_many(
                    claimed.run_id,
                    [
                        (
                            "message",
                            {
                                "message_id": str(s.id),
                                "seq": s.seq,
                                "role": s.role,
                                "content": s.content,
                                "tool_calls": s.tool_calls,
                                "tool_call_id": s.tool_call_id,
                                "tool_name": s.tool_name,
                            },
                        )
                        for s in stored
                    ],
                )

    @staticmethod
    def _row(run_id: uuid.UUID, m: BaseMessage) -> NewMessage:
        if isinstance(m, AIMessage):
            calls = [
                {"id": c.get("id"), "name": c["name"], "args": c["args"]} for c in m.tool_calls
            ]
            return NewMessage(
                role="assistant",
                content=storable_text(message_text(m)),
                lc_id=_storable_id(m.id),
                tool_calls=_json_safe(calls) or None,
                run_id=run_id,
            )
        assert isinstance(m, ToolMessage)
        return NewMessage(
            role="tool",
            content=storable_text(message_text(m)),
            lc_id=_storable_id(m.id),
            tool_call_id=storable_text(m.tool_call_id),
            tool_name=_storable_id(m.name),
            run_id=run_id,
        )

    async def _event(self, run_id: uuid.UUID, type_: str, data: dict[str, Any]) -> None:
        await self._events(run_id, [(type_, data)])

    async def _events(self, run_id: uuid.UUID, events: list[tuple[str, dict[str, Any]]]) -> None:
        async with self.sessions() as session, session.begin():
            await self._assert_lease(session, run_id)
            await RunEventRepository(session).append_many(
                run_id, [(t, _json_safe(d)) for t, d in events]
            )

    async def _assert_lease(self, session: AsyncSession, run_id: uuid.UUID) -> None:
        """Writes of a run whose lease was recovered elsewhere must stop, not interleave with
        the thread's next run (LangGraph itself would let both write)."""
        if not await RunRepository(session).holds_lease(run_id, self.holder):
            raise LeaseLost(f"run {run_id} is no longer leased to this worker")

    async def _finish(
        self,
        claimed: ClaimedRun,
        status: RunStatus,
        error: RunError | None,
        interrupt: dict[str, Any] | None,
    ) -> None:
        async with self.sessions() as session, session.begin():
            runs = RunRepository(session)
            run = await runs.lock(claimed.run_id)
            if run is None or run.status != RunStatus.RUNNING or run.lease_holder != self.holder:
                return  # recovered or cancelled meanwhile: the other party wrote the outcome
            if run.cancel_requested and status != RunStatus.COMPLETED:
                status, error = RunStatus.CANCELLED, CANCELLED
            fields: dict[str, Any] = {
                "status": status,
                "error": error.message if error else None,
                "error_code": error.code if error else None,
                "interrupt": interrupt,
            }
            if status == RunStatus.INTERRUPTED:
                fields["lease_holder"] = None
                fields["lease_expires_at"] = None
            else:
                fields["finished_at"] = func.now()
            await runs.set_fields(claimed.run_id, **fields)
            metrics.record_run_finished(status)
            await RunEventRepository(session).append(
                claimed.run_id,
                "status",
                {
                    "status": status.value,
                    "error": error.message if error else None,
                    "error_code": error.code if error else None,
                    "interrupt": interrupt,
                    "final": status != RunStatus.INTERRUPTED,
                },
            )

    async def _finish_cancelled_or_lost(self, claimed: ClaimedRun) -> None:
        if self._stopping:  # stopped by drain/stop, not by a cancel or a lost lease
            await self._release(claimed)
            return
        async with self.sessions() as session, session.begin():
            runs = RunRepository(session)
            run = await runs.lock(claimed.run_id)
            if run is None or run.status != RunStatus.RUNNING:
                return
            if run.lease_holder != self.holder and not run.cancel_requested:
                return
            await _end_stopped(session, claimed.run_id, cancelled=run.cancel_requested)


async def _end_stopped(session: AsyncSession, run_id: uuid.UUID, *, cancelled: bool) -> None:
    """``cancelled`` by request, else ``failed``: the worker lost the run without a handoff."""
    error = CANCELLED if cancelled else WORKER_STOPPED
    await RunRepository(session).set_fields(
        run_id,
        status=RunStatus.CANCELLED if cancelled else RunStatus.FAILED,
        error=error.message,
        error_code=error.code,
        finished_at=func.now(),
    )
    metrics.record_run_finished(RunStatus.CANCELLED if cancelled else RunStatus.FAILED)
    await RunEventRepository(session).append(
        run_id,
        "status",
        {
            "status": "cancelled" if cancelled else "failed",
            "error": error.message,
            "error_code": error.code,
            "final": True,
        },
    )
