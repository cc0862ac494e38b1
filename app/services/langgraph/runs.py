"""LangGraph runs on Threadkeeper's intake queue: a run is a run request (its id is the run id,
so a queued one is ``pending``); a ``command.resume`` answers the thread's interrupted run."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.db.models import AgentRun, AgentRunRequest, RequestStatus, RunStatus
from app.db.run_events import hitl_request
from app.domain.errors import (
    AgentMismatch,
    NotFound,
    NotImplementedHere,
    NotSupported,
    ThreadBusy,
    ValidationFailed,
)
from app.repositories.conversations import ConversationRepository
from app.repositories.run_events import RunEventRepository
from app.repositories.runs import RunRepository, RunRequestRepository
from app.services.forks import ForkAsk
from app.services.intake import IntakeService, RunAsk
from app.services.langgraph.assistants import find_agent
from app.services.langgraph.statuses import LangGraphRunStatus, agent_run_status, run_status
from app.services.langgraph.threads import LangGraphThreadService
from app.services.runs import ReviewDecision, RunService, review_decision


@dataclass(frozen=True, slots=True)
class RunInput:
    """What a run asks for, already checked by the API layer's shapes."""

    assistant_id: str
    #: The human message's text and its client-chosen id (None: a resume).
    text: str | None
    message_id: str | None
    #: ``command.resume``: the approval decisions, or a graph's own interrupt's answer.
    resume: Any = None
    multitask_strategy: Literal["enqueue", "reject"] = "enqueue"
    if_not_exists: Literal["reject", "create"] = "reject"
    checkpoint_id: str | None = None
    #: The stream modes the run was created with (a join stream without modes replays these).
    stream_modes: tuple[str, ...] = ()
    #: No input, from ``checkpoint_id``: the answer there again (a fork).
    regenerate: bool = False
    #: ``config.configurable`` for the graph (Threadkeeper's own keys already refused).
    configurable: dict[str, Any] | None = None
    #: The graph's runtime context (a graph of the user's own with a ``context_schema``).
    context: dict[str, Any] | None = None
    #: Where the run is POSTed when it ends (checked by the API layer).
    webhook: str | None = None


@dataclass(frozen=True, slots=True)
class LangGraphRun:
    """A LangGraph run: a run request (``request``), or a resume of an interrupted ``run``
    (LangGraph lists a resume as a run of its own: its id is the agent run's)."""

    run_id: uuid.UUID
    thread_id: uuid.UUID
    #: The thread's agent (``conversations.agent_id``, the one home of it).
    assistant_id: str
    request: AgentRunRequest | None
    run: AgentRun | None
    #: When the agent run was last resumed (None: never).
    resumed_at: datetime | None = None

    @property
    def status(self) -> LangGraphRunStatus:
        if self.request is not None:
            if self.resumed_at is not None:
                return "success"  # it ended at its interrupt; the resume is a run of its own
            return run_status(self.request, self.run)
        assert self.run is not None
        return agent_run_status(self.run)

    @property
    def stream_modes(self) -> list[str]:
        """The modes the run was created with ([] when it named none, or for a resume)."""
        if self.request is None:
            return []
        return [str(m) for m in self.request.payload.get("stream_mode") or []]

    @property
    def created_at(self) -> datetime:
        """A resume's: when it was resumed."""
        if self.request is not None:
            return self.request.created_at
        assert self.run is not None
        return self.resumed_at or self.run.created_at

    @property
    def updated_at(self) -> datetime:
        if self.run is None:
            return self.created_at
        if self.request is not None and self.resumed_at is not None:
            return self.resumed_at  # it ended at its interrupt
        return self.run.finished_at or self.run.started_at or self.created_at

    @property
    def failure(self) -> AgentRun | None:
        """The agent run whose outcome fields (``error_code``...) this LangGraph run reports (a
        request whose run was resumed ended at its interrupt: none)."""
        return self.run if self.request is None or self.resumed_at is None else None


def run_extra(ask: RunInput) -> dict[str, Any]:
    """What the run request's payload carries for the worker besides the input: the stream
    modes named (the worker streams ``tasks``/``checkpoints``/``debug`` only when asked), the
    graph's ``configurable`` and runtime ``context``."""
    extra: dict[str, Any] = {}
    if ask.stream_modes:
        extra["stream_mode"] = list(ask.stream_modes)
    if ask.configurable:
        extra["configurable"] = ask.configurable
    if ask.context:
        extra["context"] = ask.context
    return extra


def resume_decisions(resume: Any) -> list[ReviewDecision]:
    """``command.resume`` as langchain's HITL middleware takes it (``{decisions: [...]}``, or
    keyed by interrupt id) -> our decisions; an ``edit`` carries ``edited_action.args``."""
    if isinstance(resume, dict) and "decisions" not in resume and len(resume) == 1:
        resume = next(iter(resume.values()))
    decisions = resume.get("decisions") if isinstance(resume, dict) else None
    if not isinstance(decisions, list):
        raise ValidationFailed(
            "command.resume must be {decisions: [...]} (one per pending tool call)",
            field="command.resume",
        )
    out: list[ReviewDecision] = []
    for index, d in enumerate(decisions):
        kind = d.get("type") if isinstance(d, dict) else None
        if kind not in ("approve", "reject", "edit", "respond"):
            raise ValidationFailed(
                f"decision {index}: type must be approve, reject, edit or respond",
                field=f"command.resume.decisions[{index}].type",
            )
        edited = d.get("edited_action")
        if kind == "edit" and edited is None:
            # /v1's older ``args`` is not LangGraph's shape: name the field this door reads.
            raise ValidationFailed(
                f"decision {index}: an edit decision carries the tool call as "
                "edited_action: {name, args}" + (" (not a top-level args)" if "args" in d else ""),
                field=f"command.resume.decisions[{index}].edited_action",
            )
        if edited is not None and not isinstance(edited, dict):
            raise ValidationFailed(
                f"decision {index}: edited_action must be {{name, args}}",
                field=f"command.resume.decisions[{index}].edited_action",
            )
        out.append(
            review_decision(index, kind, d.get("message"), edited, field="command.resume.decisions")
        )
    return out


class LangGraphRunService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        threads: LangGraphThreadService,
        intake: IntakeService,
        runs: RunService,
        agents: AgentRegistry,
    ) -> None:
        self.sessions = sessions
        self.threads = threads
        self.intake = intake
        self.runs = runs
        self.agents = agents

    async def start(self, thread_id: uuid.UUID, owner_id: str, ask: RunInput) -> LangGraphRun:
        """New input through /v1's intake use case (the same lock, queue and agent rule);
        ``command.resume`` through /v1's resume."""
        agent = find_agent(self.agents, ask.assistant_id)
        if ask.context and not agent.model.startswith("graph:"):
            raise NotSupported(
                "context is not supported by an agent Threadkeeper assembles (its runtime "
                "context is Threadkeeper's own); a graph of your own (graph = ...) with a "
                "context_schema gets it",
                field="context",
            )
        await self._ensure_thread(thread_id, owner_id, ask.if_not_exists)
        extra = run_extra(ask)
        if ask.checkpoint_id is not None:
            head = await self.threads.head_checkpoint_id(thread_id)
            if ask.regenerate or ask.checkpoint_id != head:
                if ask.resume is not None:
                    raise NotImplementedHere(
                        "a resume answers the head's interrupt: name no checkpoint"
                    )
                # A run from an earlier checkpoint forks the thread (Edit, Regenerate).
                fork = ForkAsk(
                    ask.checkpoint_id,
                    ask.text,
                    agent_id=agent.id,
                    lc_id=ask.message_id,
                    extra=extra,
                )
                accepted = await self.intake.fork(thread_id, owner_id, fork)
                return await self.get(thread_id, accepted.request_id, owner_id)
        if ask.text is None:
            return await self._resume(thread_id, owner_id, agent.id, ask.resume)
        accepted = await self.intake.post_run(
            thread_id,
            owner_id,
            RunAsk(
                ask.text,
                agent_id=agent.id,
                lc_id=ask.message_id,
                only_if_idle=ask.multitask_strategy == "reject",
                extra=extra,
            ),
        )
        return await self.get(thread_id, accepted.request_id, owner_id)

    async def get(self, thread_id: uuid.UUID, run_id: uuid.UUID, owner_id: str) -> LangGraphRun:
        """By request id (a run as created), else by agent run id (a resume)."""
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            request = await RunRequestRepository(session).get(run_id)
            if request is not None and request.thread_id == thread_id:
                run = await RunRepository(session).for_request(run_id)
            else:
                request, run = None, await RunRepository(session).get(run_id)
                if run is None or run.thread_id != thread_id:
                    raise NotFound(f"run {run_id} not found")
            resumed = await RunEventRepository(session).resumed_at([run.id] if run else [])
            return LangGraphRun(
                run_id, thread_id, conv.agent_id, request, run, resumed.get(run.id) if run else None
            )

    async def list(
        self, thread_id: uuid.UUID, owner_id: str, *, limit: int, offset: int
    ) -> list[LangGraphRun]:
        """Newest first: per request, its resume (when its run was resumed), then the request's
        own run. Three queries, whatever the page's size."""
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            requests = await RunRequestRepository(session).list_for_thread(
                thread_id, limit=offset + limit
            )
            runs = await RunRepository(session).for_requests([r.id for r in requests])
            resumed = await RunEventRepository(session).resumed_at([r.id for r in runs.values()])
        out: list[LangGraphRun] = []
        for request in requests:
            run = runs.get(request.id)
            at = resumed.get(run.id) if run is not None else None
            if run is not None and at is not None:
                out.append(LangGraphRun(run.id, thread_id, conv.agent_id, None, run, at))
            out.append(LangGraphRun(request.id, thread_id, conv.agent_id, request, run, at))
        return out[offset : offset + limit]

    async def cancel(self, thread_id: uuid.UUID, run_id: uuid.UUID, owner_id: str) -> None:
        """A pending run is withdrawn from the queue; a running or interrupted one cancelled
        (its worker stops it); a finished one is left as it is."""
        found = await self.get(thread_id, run_id, owner_id)
        if found.request is not None and found.request.status == RequestStatus.QUEUED:
            await self.runs.cancel_request(found.request.id, owner_id)
            return
        if found.run is not None and found.run.status in (
            RunStatus.RUNNING,
            RunStatus.INTERRUPTED,
        ):
            await self.runs.cancel(found.run.id, owner_id)

    async def delete(self, thread_id: uuid.UUID, run_id: uuid.UUID, owner_id: str) -> None:
        """Only a pending run can go (withdrawn); runs that ran are the thread's history."""
        found = await self.get(thread_id, run_id, owner_id)
        if found.status == "pending" and found.request is not None:
            await self.runs.cancel_request(found.request.id, owner_id)
            return
        if found.status == "running":
            raise ThreadBusy("the run is running; cancel it first")
        raise NotImplementedHere(
            "runs that ran are kept as the thread's history and cannot be deleted"
        )

    async def _resume(
        self,
        thread_id: uuid.UUID,
        owner_id: str,
        assistant_id: str,
        resume: Any,
    ) -> LangGraphRun:
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            latest: Sequence[AgentRun] = await RunRepository(session).list_for_thread(
                thread_id, limit=1
            )
        if conv.agent_id != assistant_id:
            raise AgentMismatch(f"this thread runs agent {conv.agent_id!r}, not {assistant_id!r}")
        if not latest or latest[0].status != RunStatus.INTERRUPTED:
            raise ValidationFailed("the thread has no interrupted run to resume", field="command")
        if hitl_request(latest[0].interrupt) is None:  # a graph's own interrupt(value)
            run = await self.runs.resume(latest[0].id, owner_id, None, value=resume)
        else:
            run = await self.runs.resume(latest[0].id, owner_id, resume_decisions(resume))
        return await self.get(thread_id, run.id, owner_id)

    async def _ensure_thread(self, thread_id: uuid.UUID, owner_id: str, if_not_exists: str) -> None:
        if if_not_exists == "create":
            await self.threads.create(
                owner_id, thread_id=thread_id, metadata={}, if_exists="do_nothing"
            )
