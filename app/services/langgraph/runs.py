"""LangGraph runs on Threadkeeper's intake queue: a run is a run request (its id is the run id,
so a queued one is ``pending``); a ``command.resume`` answers the thread's interrupted run."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.db.models import AgentRun, AgentRunRequest, RequestStatus, RunStatus
from app.db.run_events import hitl_request
from app.domain.errors import NotFound, NotImplementedHere, ThreadBusy, ValidationFailed
from app.repositories.conversations import ConversationRepository
from app.repositories.intake import IntakeRepository
from app.repositories.runs import RunRepository, RunRequestRepository
from app.services.langgraph.assistants import find_agent
from app.services.langgraph.shapes import (
    LangGraphRunStatus,
    agent_run_status,
    run_failure,
    run_json,
    run_status,
)
from app.services.langgraph.threads import LangGraphThreadService
from app.services.runs import ReviewDecision, RunService, review_decision


@dataclass(frozen=True, slots=True)
class RunInput:
    """What a run asks for, already checked by the API layer's shapes."""

    assistant_id: str
    #: The human message's text and its client-chosen id (None: a resume).
    text: str | None
    message_id: str | None
    resume: Any = None
    multitask_strategy: Literal["enqueue", "reject"] = "enqueue"
    if_not_exists: Literal["reject", "create"] = "reject"
    checkpoint_id: str | None = None


@dataclass(frozen=True, slots=True)
class LangGraphRun:
    """A LangGraph run: a run request (``request``), or a resume of an interrupted ``run``."""

    run_id: uuid.UUID
    thread_id: uuid.UUID
    assistant_id: str
    request: AgentRunRequest | None
    run: AgentRun | None

    @property
    def status(self) -> LangGraphRunStatus:
        if self.request is not None:
            return run_status(self.request, self.run)
        assert self.run is not None
        return agent_run_status(self.run)

    def json(self) -> dict[str, Any]:
        created = self.request.created_at if self.request is not None else None
        if created is None:
            assert self.run is not None
            created = self.run.created_at
        updated = self.run.finished_at or self.run.started_at if self.run is not None else None
        return run_json(
            self.run_id,
            self.thread_id,
            self.assistant_id,
            self.status,
            created,
            updated,
            run_failure(self.run),
        )


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
        lock_timeout_ms: int,
        threads: LangGraphThreadService,
        runs: RunService,
        agents: AgentRegistry,
        on_enqueued: Callable[[], None] | None = None,
    ) -> None:
        self.sessions = sessions
        self.lock_timeout_ms = lock_timeout_ms
        self.threads = threads
        self.runs = runs
        self.agents = agents
        self.on_enqueued = on_enqueued

    async def start(self, thread_id: uuid.UUID, owner_id: str, ask: RunInput) -> LangGraphRun:
        agent = find_agent(self.agents, ask.assistant_id)
        if ask.text is not None:  # new input its agent cannot run now is refused (409)
            self.agents.require_available(agent.id)
        await self._ensure_thread(thread_id, owner_id, ask.if_not_exists)
        if ask.checkpoint_id is not None:
            head = await self.threads.head_checkpoint_id(thread_id)
            if head is not None and ask.checkpoint_id != head:
                raise NotImplementedHere(
                    "branching from an older checkpoint is not supported: run on the head"
                )
        if ask.text is None:
            return await self._resume(thread_id, owner_id, agent.id, ask.resume)
        async with self.sessions() as session, session.begin():
            conversations = ConversationRepository(session)
            conv = await conversations.lock(
                thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms
            )
            if (
                ask.multitask_strategy == "reject"
                and await conversations.status(thread_id) != "idle"
            ):
                raise ThreadBusy("the thread has a run or queued input (multitask_strategy=reject)")
            await self._bind_assistant(session, conv.meta, thread_id, agent.id)
            row = await IntakeRepository(await session.connection()).accept_user_message(
                thread_id,
                owner_id,
                ask.text,
                lock_timeout_ms=self.lock_timeout_ms,
                lc_id=ask.message_id,
            )
        if self.on_enqueued is not None:
            self.on_enqueued()
        return await self.get(thread_id, row.request_id, owner_id)

    async def get(self, thread_id: uuid.UUID, run_id: uuid.UUID, owner_id: str) -> LangGraphRun:
        """By request id (a run as created), else by agent run id (a resume)."""
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            assistant = str(conv.meta.get("assistant_id") or conv.agent_id)
            request = await RunRequestRepository(session).get(run_id)
            if request is not None and request.thread_id == thread_id:
                run = await RunRepository(session).for_request(run_id)
                return LangGraphRun(run_id, thread_id, assistant, request, run)
            run = await RunRepository(session).get(run_id)
            if run is not None and run.thread_id == thread_id:
                return LangGraphRun(run_id, thread_id, assistant, None, run)
        raise NotFound(f"run {run_id} not found")

    async def list(
        self, thread_id: uuid.UUID, owner_id: str, *, limit: int, offset: int
    ) -> list[LangGraphRun]:
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            assistant = str(conv.meta.get("assistant_id") or conv.agent_id)
            requests = await RunRequestRepository(session).list_for_thread(
                thread_id, limit=limit, offset=offset
            )
            runs = RunRepository(session)
            return [
                LangGraphRun(r.id, thread_id, assistant, r, await runs.for_request(r.id))
                for r in requests
            ]

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

    async def dispatched_run(self, request_id: uuid.UUID) -> tuple[RequestStatus, AgentRun | None]:
        async with self.sessions() as session:
            request = await RunRequestRepository(session).get(request_id)
            if request is None:
                raise NotFound(f"run {request_id} not found")
            return request.status, await RunRepository(session).for_request(request_id)

    async def _resume(
        self, thread_id: uuid.UUID, owner_id: str, assistant_id: str, resume: Any
    ) -> LangGraphRun:
        async with self.sessions() as session:
            await ConversationRepository(session).get_owned(thread_id, owner_id)
            latest: Sequence[AgentRun] = await RunRepository(session).list_for_thread(
                thread_id, limit=1
            )
        if not latest or latest[0].status != RunStatus.INTERRUPTED:
            raise ValidationFailed("the thread has no interrupted run to resume", field="command")
        if hitl_request(latest[0].interrupt) is None:  # a graph's own interrupt(value)
            run = await self.runs.resume(latest[0].id, owner_id, None, value=resume)
        else:
            run = await self.runs.resume(latest[0].id, owner_id, resume_decisions(resume))
        return LangGraphRun(run.id, thread_id, assistant_id, None, run)

    async def _ensure_thread(self, thread_id: uuid.UUID, owner_id: str, if_not_exists: str) -> None:
        async with self.sessions() as session:
            exists = await ConversationRepository(session).get(thread_id)
        if exists is None and if_not_exists == "create":
            await self.threads.create(
                owner_id, thread_id=thread_id, metadata={}, if_exists="do_nothing"
            )

    @staticmethod
    async def _bind_assistant(
        session: AsyncSession, meta: dict[str, Any], thread_id: uuid.UUID, agent_id: str
    ) -> None:
        """The first run names the thread's assistant in its metadata (Agent Chat UI lists
        threads by ``graph_id``); the thread's agent is then fixed."""
        if meta.get("graph_id") == agent_id and meta.get("assistant_id") == agent_id:
            return
        if "assistant_id" in meta and meta["assistant_id"] != agent_id:
            raise ValidationFailed(
                f"this thread runs assistant {meta['assistant_id']!r}, not {agent_id!r}",
                field="assistant_id",
            )
        merged = {**meta, "graph_id": agent_id, "assistant_id": agent_id}
        await ConversationRepository(session).update(thread_id, meta=merged, agent_id=agent_id)
