"""One claimed run, from its graph input to its outcome: stream the graph under a lease (kept
alive by a heartbeat), ledger what it produces, ride out a database outage, stop at a step
boundary when the worker drains."""

from __future__ import annotations

import asyncio
import contextlib
import traceback
import uuid
from typing import Any

import structlog
from langchain_core.messages import AIMessageChunk
from langgraph.types import Command
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.agents.context import AgentContext
from app.agents.graph import AgentRuntime
from app.agents.registry import AgentRegistry
from app.compression.binding import bound
from app.compression.messages import message_text
from app.config import WorkerSettings
from app.db.checkpoint_codec import fork_tag
from app.db.driver import driver
from app.db.errors import is_connection_error
from app.db.models import RunStatus
from app.db.run_events import GRAPH_STREAM_MODES, DeltaEvent, ProviderRetryEvent, RunError
from app.domain.errors import AgentUnavailable
from app.repositories.agent_state import AgentStateRepository
from app.repositories.run_events import ActivityEvent
from app.repositories.run_leases import RunLeaseStatements
from app.worker.claims import ClaimedRun, Handoff
from app.worker.errors import AGENT_UNAVAILABLE, classify_run_error, error_log_fields
from app.worker.graph_stream import graph_stream
from app.worker.ledger import (
    DeltaBuffer,
    LeaseLost,
    RunLedger,
    custom_event,
    graph_stream_event,
    interrupt_payload,
    state_event,
    update_event,
)
from app.worker.outage import DATABASE_RETRIES, DatabaseWait, ResumePoint
from app.worker.outcome import RunOutcomes, RunResult
from app.worker.repair import repair_dangling_tool_calls

log = structlog.get_logger(__name__)


class HandedOff(Exception):
    """The worker is draining: the run stopped at a step boundary and goes to another worker."""


class StreamedAttempt:
    """The streamed text of the model call in progress: its messages' ids (``ids``), and of all
    the run's, the ids whose deltas were written (``sent``), so a failed attempt's can be
    withdrawn."""

    def __init__(self, sent: set[str | None] | None = None) -> None:
        self.ids: set[str | None] = set()
        self.sent: set[str | None] = sent if sent is not None else set()

    def note_sent(self, events: list[ActivityEvent]) -> None:
        self.sent.update(e.lc_id for e in events if isinstance(e, DeltaEvent))

    def withdraw(self, deltas: DeltaBuffer, pending: list[ActivityEvent]) -> str | None:
        """Drop this attempt's unsent text (buffered, or drained into ``pending``); the id of
        its text already sent, if any. The next attempt starts afresh."""
        deltas.withdraw(self.ids)
        pending[:] = [e for e in pending if not (isinstance(e, DeltaEvent) and e.lc_id in self.ids)]
        sent = sorted(str(i) for i in self.ids & self.sent if i is not None)
        self.ids = set()
        return sent[0] if sent else None


class _RunFailed(Exception):
    def __init__(self, error: RunError) -> None:
        super().__init__(error.code)
        self.error = error


class _AgentRun:
    """The thread's agent for one run: its runtime and its graph's view of the state."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime
        self.state = runtime.state()


class DrainSignal:
    """What the claim loop tells its runs: ``stopping`` (a stopped task is released, not
    failed) and ``handoff`` (the grace period is over: stop at the next step boundary)."""

    def __init__(self) -> None:
        self.stopping = False
        self.handoff = asyncio.Event()


class RunExecutor:
    def __init__(
        self,
        *,
        settings: WorkerSettings,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine,
        agents: AgentRegistry,
        holder: str,
        drain: DrainSignal,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.agents = agents
        self.holder = holder
        self.drain = drain
        self.ledger = RunLedger(sessions, holder, settings.lease_seconds, engine=engine)
        self.outage = DatabaseWait(self.ledger, settings.lease_seconds)
        self.outcomes = RunOutcomes(sessions, holder, engine=engine)

    async def execute(self, claimed: ClaimedRun) -> None:
        bound = log.bind(run_id=str(claimed.run_id), thread_id=str(claimed.thread_id))
        heartbeat = asyncio.create_task(self._heartbeat(claimed.run_id))
        runner = asyncio.create_task(self._run_graph(claimed))
        interrupted = False
        try:
            done, _ = await asyncio.wait({heartbeat, runner}, return_when=asyncio.FIRST_COMPLETED)
            if heartbeat in done and not runner.done():
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner
                await self._stopped(claimed)
                return
            result = runner.result()
            await self.outcomes.finish(claimed, result)
            bound.info("run_finished", status=result.status.value)
            interrupted = result.status == RunStatus.INTERRUPTED
        except asyncio.CancelledError:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
            await asyncio.shield(self._stopped(claimed))
            raise
        except HandedOff:
            await self.outcomes.release(claimed)
            bound.info("run_released")
        except LeaseLost:
            bound.warning("run_lease_lost")  # recovered elsewhere: the outcome is theirs to write
        except Exception as exc:
            bound.error("run_crashed", **error_log_fields(exc))
            await self.outcomes.finish(
                claimed, RunResult(RunStatus.FAILED, error=classify_run_error(exc))
            )
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await heartbeat
        if interrupted:
            # After the run's outcome, in a transaction of its own: a failure here leaves the
            # run interrupted and the input queued behind it (as an agent that queues has it),
            # never a second outcome for a run that has ended.
            try:
                await self._supersede_if_input_waits(claimed)
            except Exception as exc:
                bound.warning("run_supersede_failed", **error_log_fields(exc))

    async def _supersede_if_input_waits(self, claimed: ClaimedRun) -> None:
        """Input sent while the run ran, and the run then stopped for a human: unless the
        agent queues behind approvals, the input supersedes it (``RunOutcomes``)."""
        if claimed.agent_id in self.agents.queueing_agents():
            return
        timeout_ms = int(self.settings.lease_seconds * 1000)
        if await self.outcomes.supersede_if_input_waits(claimed, timeout_ms):
            log.info("run_superseded_by_queued_input", run_id=str(claimed.run_id))

    async def _stopped(self, claimed: ClaimedRun) -> None:
        if self.drain.stopping:  # stopped by drain/stop, not by a cancel or a lost lease
            await self.outcomes.release(claimed)
        else:
            await self.outcomes.stopped(claimed)

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
                async with driver(self.ledger.engine) as conn:
                    alive = await RunLeaseStatements(conn).heartbeat(
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

    # --- the graph run --------------------------------------------------------------------------
    async def _run_graph(self, claimed: ClaimedRun) -> RunResult:
        try:
            run = _AgentRun(self.agents.runtime(claimed.agent_id))
        except AgentUnavailable as exc:
            log.warning(
                "run_agent_unavailable",
                run_id=str(claimed.run_id),
                agent_id=claimed.agent_id,
                reason=exc.reason,
            )
            return RunResult(RunStatus.FAILED, error=AGENT_UNAVAILABLE)
        graph_input, waiting = await self._prepare(claimed, run.state)
        try:
            interrupt, retried = await self._stream_until_done(claimed, run, graph_input, waiting)
        except _RunFailed as failed:
            return RunResult(RunStatus.FAILED, error=failed.error)
        if retried:
            # A step that finished before the outage but whose checkpoint was not yet written is
            # applied from LangGraph's saved task writes on the retry, without streaming its
            # update again: take anything still missing from the history from the final state
            # (idempotent on message ids).
            snapshot = await run.state.get(claimed.thread_id)
            await self.ledger.persist_update(
                claimed.thread_id, claimed.run_id, {"messages": snapshot.messages}
            )
            if run.runtime.own_graph:  # and the state keys it ended with, after them
                await self.ledger.append(
                    claimed.thread_id,
                    claimed.run_id,
                    [state_event(snapshot.values, run.runtime.output_keys)],
                )
        if interrupt is not None:
            return RunResult(RunStatus.INTERRUPTED, interrupt=interrupt)
        await self._prune_checkpoints(claimed, run.state)
        return RunResult(RunStatus.COMPLETED)

    async def _prepare(
        self, claimed: ClaimedRun, state: AgentStateRepository
    ) -> tuple[Any, frozenset[str]]:
        """The graph input to start with, and (a resumed run) the interrupts it answers."""
        graph_input = claimed.graph_input
        if isinstance(graph_input, Handoff):
            graph_input = await self._takeover_input(graph_input, claimed.thread_id, state)
        waiting: frozenset[str] = frozenset()
        if isinstance(graph_input, dict) and claimed.repair:
            await repair_dangling_tool_calls(
                state,
                self.ledger,
                claimed.thread_id,
                claimed.run_id,
                superseded=claimed.superseded,
            )
        elif isinstance(graph_input, Command):
            snapshot = await state.get(claimed.thread_id)
            waiting = frozenset(str(i.id) for i in snapshot.interrupts)
        return graph_input, waiting

    @staticmethod
    async def _takeover_input(
        handoff: Handoff, thread_id: uuid.UUID, state: AgentStateRepository
    ) -> Any:
        """Continue from the checkpoint (``None``), unless the run's own input never got there."""
        if handoff.human is None:
            return None
        snapshot = await state.get(thread_id)
        ids = {m.id for m in snapshot.messages}
        return None if handoff.human.id in ids else {"messages": [handoff.human]}

    async def _stream_until_done(
        self, claimed: ClaimedRun, run: _AgentRun, graph_input: Any, waiting: frozenset[str]
    ) -> tuple[dict[str, Any] | None, int]:
        """The pending interrupt (if any) and how often a lost database connection was ridden
        out; raises ``_RunFailed`` when the run fails."""
        # One context for the whole run: what is bounded per run (provider retries) stays so
        # across a database outage ridden out.
        context = AgentContext(owner_id=claimed.owner_id, thread_id=str(claimed.thread_id))
        retries = 0
        # A fork starts from its checkpoint; a retry after an outage continues from the head,
        # which its first attempt made the fork's (LangGraph's latest checkpoint).
        start = claimed.fork.checkpoint_id if claimed.fork is not None else None
        while True:
            try:
                with (
                    bound(run.runtime.binding(claimed.owner_id)),
                    fork_tag(claimed.fork.tag if claimed.fork is not None else None),
                ):
                    interrupt = await self._stream_run(
                        claimed, run.runtime, graph_input, context, start
                    )
                return interrupt, retries
            except (LeaseLost, HandedOff):
                raise
            except Exception as exc:
                if retries >= DATABASE_RETRIES or not is_connection_error(exc):
                    raise self._failed(claimed, exc, run.runtime) from exc
                retries += 1
                log.warning(
                    "run_database_lost",
                    run_id=str(claimed.run_id),
                    retry=retries,
                    error=type(exc).__name__,
                )
                if start is not None and not await self._fork_started(claimed, run.state):
                    continue  # the fork wrote nothing yet: start it over, same input
                start = None
                point = await self._after_outage(claimed, waiting, run.state)
            if not point.again:
                return point.interrupt, retries
            graph_input = point.graph_input

    async def _fork_started(self, claimed: ClaimedRun, state: AgentStateRepository) -> bool:
        """Whether a fork run's first checkpoint was written (the head moved from the one it
        replaces); waits out the outage like ``_after_outage``."""
        assert claimed.fork is not None
        try:
            snapshot, _ = await self.outage.snapshot(claimed.run_id, claimed.thread_id, state)
        except LeaseLost:
            raise
        except Exception as still:
            raise self._failed(claimed, still, None) from still
        return snapshot.checkpoint_id != claimed.fork.head

    async def _after_outage(
        self, claimed: ClaimedRun, waiting: frozenset[str], state: AgentStateRepository
    ) -> ResumePoint:
        try:
            return await self.outage.resume_point(claimed, waiting, state)
        except LeaseLost:
            raise
        except Exception as still:
            raise self._failed(claimed, still, None) from still

    @staticmethod
    def _failed(
        claimed: ClaimedRun, exc: BaseException, runtime: AgentRuntime | None
    ) -> _RunFailed:
        """The run's failure, logged with what an operator needs to tell a wrong key from a
        wrong base URL: the agent, its model and endpoint, the provider's status, code and
        (redacted) message."""
        error = classify_run_error(exc, own_graph=runtime is not None and runtime.own_graph)
        where = {"model": runtime.model_name, "endpoint": runtime.endpoint} if runtime else {}
        if error.code == "graph_error":
            where["traceback"] = "".join(traceback.format_exception(exc))[-8000:]
        log.warning(
            "run_failed",
            run_id=str(claimed.run_id),
            agent_id=claimed.agent_id,
            error_code=error.code,
            **where,
            **error_log_fields(exc),
        )
        return _RunFailed(error)

    async def _stream_run(
        self,
        claimed: ClaimedRun,
        runtime: AgentRuntime,
        graph_input: Any,
        context: AgentContext,
        start: str | None = None,
    ) -> dict[str, Any] | None:
        """Stream the graph (from checkpoint ``start`` when given: a fork), persisting messages
        and events; the pending interrupt, if any."""
        config = runtime.config_for(claimed.thread_id)
        options = claimed.options
        if options.configurable:
            # The client's keys under Threadkeeper's (thread and checkpoint stay ours).
            config = {
                **config,
                "configurable": {**options.configurable, **config.get("configurable", {})},
            }
        if start is not None:
            config = {
                **config,
                "configurable": {
                    **config.get("configurable", {}),
                    "checkpoint_ns": "",
                    "checkpoint_id": start,
                },
            }
        interrupt: dict[str, Any] | None = None
        deltas = DeltaBuffer(
            self.settings.delta_flush_ms / 1000, max_chars=self.settings.delta_flush_chars
        )
        stream = graph_stream(runtime, graph_input, config, context, claimed.options)
        # Custom events wait for the step's write (or the next delta flush), so a step costs
        # one statement whatever it streamed; the order (custom, deltas, messages) is kept.
        pending: list[ActivityEvent] = []
        attempt = StreamedAttempt()
        async for mode, chunk in stream:
            if mode == "messages":
                message, meta = chunk
                # Any node's chat model streams (the summarizer's calls are tagged nostream).
                if isinstance(message, AIMessageChunk):
                    deltas.add(message.id, message_text(message), meta.get("langgraph_node"))
                    attempt.ids.add(message.id)
                if deltas.due():
                    pending.extend(deltas.drain())
                    await self._append(claimed, pending, attempt)
                continue
            if mode in GRAPH_STREAM_MODES:
                # Passed through as LangGraph streamed it; written with the next step.
                pending.extend(deltas.drain())
                pending.append(graph_stream_event(mode, chunk))
                continue
            if mode == "values":
                # A graph of the user's own: its state keys as they stand after the step (or at
                # the run's start), for the LangGraph door's ``values``; written now, in one
                # statement with what waited. (At an interrupt the run's status event tells.)
                if not (isinstance(chunk, dict) and "__interrupt__" in chunk):
                    pending.extend([*deltas.drain(), state_event(chunk, runtime.output_keys)])
                    await self._append(claimed, pending, attempt)
                continue
            if mode == "custom":
                event = custom_event(chunk)
                if isinstance(event, ProviderRetryEvent):
                    # The failed attempt's text is void: what was not sent yet is dropped, and
                    # what was is named, so clients drop it; sent now (the wait may be long).
                    event.discarded_lc_id = attempt.withdraw(deltas, pending)
                    pending.extend([*deltas.drain(), event])
                    await self._append(claimed, pending, attempt)
                elif event is not None:
                    pending.extend(deltas.drain())
                    pending.append(event)
                continue
            events: list[ActivityEvent] = [*pending, *deltas.drain()]
            pending.clear()
            attempt = StreamedAttempt(attempt.sent)  # a step ended: its model call is done
            for node, update in (chunk or {}).items():
                if node == "__interrupt__":
                    interrupt = interrupt_payload(update)
                    continue
                if runtime.own_graph:  # the node's update as it is, for the door's ``updates``
                    events.append(update_event(node, update))
                await self.ledger.persist_update(claimed.thread_id, claimed.run_id, update, events)
                events = []
            await self.ledger.append(claimed.thread_id, claimed.run_id, events)
            if self.drain.handoff.is_set() and mode == "updates":
                # A step just ended: stop here, and stop the graph's next step now (closing
                # the stream) rather than whenever the dropped generator is collected.
                await stream.aclose()
                raise HandedOff(str(claimed.run_id))
        await self.ledger.append(claimed.thread_id, claimed.run_id, [*pending, *deltas.drain()])
        return interrupt

    async def _append(
        self, claimed: ClaimedRun, events: list[ActivityEvent], attempt: StreamedAttempt
    ) -> None:
        """Write ``events`` now (and empty the list), noting whose streamed text went out."""
        attempt.note_sent(events)
        await self.ledger.append(claimed.thread_id, claimed.run_id, list(events))
        events.clear()

    async def _prune_checkpoints(self, claimed: ClaimedRun, state: AgentStateRepository) -> None:
        """Each step stores a full copy of the state; keep only the latest once the turn is done.

        Runs while this run is still active, so no other run or compression touches the thread.
        """
        try:
            await self.ledger.check_lease(claimed.thread_id, claimed.run_id)
            await state.prune_history(claimed.thread_id)
        except LeaseLost:
            raise
        except Exception as exc:  # housekeeping must never fail the turn
            log.warning(
                "checkpoint_prune_failed", thread_id=str(claimed.thread_id), error=repr(exc)
            )
