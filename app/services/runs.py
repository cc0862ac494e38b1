"""Run use cases: read, list, cancel, resume (following a run: app/services/run_feed.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.tools import BaseTool
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import (
    ACTIVE_RUN_STATUSES,
    AgentRun,
    AgentRunRequest,
    RequestStatus,
    RunStatus,
)
from app.db.run_events import hitl_request
from app.domain.errors import (
    InvalidState,
    InvalidToolArguments,
    RequestNotQueued,
    ValidationFailed,
)
from app.repositories.conversations import ConversationRepository
from app.repositories.run_leases import RunLeaseStatements
from app.repositories.runs import RunRepository, RunRequestRepository
from app.worker.errors import CANCELLED


@dataclass(frozen=True, slots=True)
class ReviewDecision:
    """A human's answer to one pending tool call.

    ``respond``: the tool is not run; ``message`` is returned to the model as its (successful)
    result, e.g. the human answering a question the agent meant to look up.
    """

    type: Literal["approve", "reject", "edit", "respond"]
    message: str | None = None
    args: dict[str, Any] | None = None
    #: ``edited_action.name`` when the client sent one: it must name the pending call's tool.
    name: str | None = None


def review_decision(
    index: int,
    type: Literal["approve", "reject", "edit", "respond"],
    message: str | None,
    edited_action: Mapping[str, Any] | None,
    *,
    args: dict[str, Any] | None = None,
    field: str = "decisions",
) -> ReviewDecision:
    """One decision as both doors take it: LangGraph's shape (an edit's arguments in
    ``edited_action: {name, args}``), and on /v1 also its older ``args`` beside it."""
    where = f"{field}[{index}]"
    if edited_action is not None:
        edited = edited_action.get("args")
        name = edited_action.get("name")
        if not isinstance(edited, dict) or not (name is None or isinstance(name, str)):
            raise ValidationFailed(
                f"decision {index}: edited_action must be {{name, args}} with args an object",
                field=f"{where}.edited_action",
            )
        if args is not None and args != edited:
            raise ValidationFailed(
                f"decision {index}: give the edited arguments once (edited_action.args)",
                field=f"{where}.args",
            )
        return ReviewDecision(type=type, message=message, args=edited, name=name)
    return ReviewDecision(type=type, message=message, args=args)


def _args_errors(tool: BaseTool | None, args: dict[str, Any]) -> str | None:
    """Why ``args`` do not fit the tool's call schema (what the model is shown), or None."""
    schema = tool.tool_call_schema if tool is not None else None
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return None  # no Pydantic schema to check against: the tool validates when it runs
    try:
        schema.model_validate(args)
    except PydanticValidationError as exc:
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(args)'}: {e['msg']}" for e in exc.errors()
        )
    return None


def hitl_decisions(
    interrupt: dict[str, Any] | None,
    decisions: Sequence[ReviewDecision],
    tools: Mapping[str, BaseTool] | None = None,
) -> dict[str, Any]:
    """Our API decisions -> langchain HumanInTheLoopMiddleware's resume payload, validated here
    (at resume time) so the run never resumes into a decision the middleware would refuse or
    a tool call whose edited arguments cannot bind."""
    actions = list((interrupt or {}).get("action_requests") or [])
    configs = list((interrupt or {}).get("review_configs") or [])
    if len(decisions) != len(actions):
        raise ValidationFailed(
            f"expected {len(actions)} decision(s), one per pending tool call, got {len(decisions)}"
        )
    out: list[dict[str, Any]] = []
    for index, (decision, action) in enumerate(zip(decisions, actions, strict=True)):
        allowed = configs[index].get("allowed_decisions") if index < len(configs) else None
        if allowed and decision.type not in allowed:
            raise ValidationFailed(
                f"decision {index}: {decision.type!r} is not allowed for {action['name']} "
                f"(allowed: {', '.join(allowed)})"
            )
        if decision.type == "approve":
            out.append({"type": "approve"})
        elif decision.type == "reject":
            item: dict[str, Any] = {"type": "reject"}
            if decision.message:
                item["message"] = decision.message
            out.append(item)
        elif decision.type == "respond":
            if not decision.message:
                raise ValidationFailed(f"decision {index}: a respond decision needs a message")
            out.append({"type": "respond", "message": decision.message})
        else:
            if decision.args is None:
                raise ValidationFailed(
                    f"decision {index}: an edit decision needs edited_action: {{name, args}}"
                )
            if decision.name is not None and decision.name != action["name"]:
                raise ValidationFailed(
                    f"decision {index}: edited_action.name is {decision.name!r}, but the "
                    f"pending call is to {action['name']}; an edit changes its arguments only"
                )
            problem = _args_errors((tools or {}).get(action["name"]), decision.args)
            if problem is not None:
                raise InvalidToolArguments(
                    f"decision {index}: the edited arguments do not fit {action['name']}: {problem}"
                )
            out.append(
                {"type": "edit", "edited_action": {"name": action["name"], "args": decision.args}}
            )
    return {"decisions": out}


@dataclass(frozen=True, slots=True)
class RequestView:
    """A run request and, once dispatched, the run answering it."""

    request: AgentRunRequest
    run: AgentRun | None


class RunService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        lock_timeout_ms: int,
        on_resumed: Callable[[], None] | None = None,
        on_cancel: Callable[[uuid.UUID], None] | None = None,
        tools_of: Callable[[str], Mapping[str, BaseTool]] | None = None,
        require_agent: Callable[[str], None] | None = None,
    ) -> None:
        self.sessions = sessions
        #: ``AgentUnavailable`` for an agent that cannot run now (``AgentRegistry``).
        self.require_agent = require_agent
        #: A thread's agent id -> its tools by name: edited tool arguments are checked against
        #: their schema (``AgentRegistry.tools_by_name``).
        self.tools_of = tools_of
        self.lock_timeout_ms = lock_timeout_ms
        self.on_resumed = on_resumed
        self.on_cancel = on_cancel

    def _resume_payload(
        self,
        interrupt: Any,
        agent_id: str,
        decisions: Sequence[ReviewDecision] | None,
        value: Any,
    ) -> Any:
        if hitl_request(interrupt) is None:  # a graph's own interrupt(value)
            if value is None:
                raise ValidationFailed(
                    "the run waits on the graph's own interrupt: answer it with resume (a "
                    "JSON value, not null)",
                    field="resume",
                )
            if decisions is not None:
                raise ValidationFailed(
                    "the run waits on the graph's own interrupt, not on tool calls: answer it "
                    "with resume (any JSON value), not decisions",
                    field="decisions",
                )
            return value
        if decisions is None:
            raise ValidationFailed(
                "the run waits on tool calls: answer with decisions, one per pending call",
                field="decisions",
            )
        tools = self.tools_of(agent_id) if self.tools_of else {}
        return hitl_decisions(interrupt, decisions, tools)

    async def get(self, run_id: uuid.UUID, owner_id: str) -> AgentRun:
        async with self.sessions() as session:
            run = await RunRepository(session).get_owned(run_id, owner_id)
            return run

    async def get_request(self, request_id: uuid.UUID, owner_id: str) -> RequestView:
        async with self.sessions() as session:
            request = await RunRequestRepository(session).get_owned(request_id, owner_id)
            return RequestView(request, await RunRepository(session).for_request(request_id))

    async def cancel_request(self, request_id: uuid.UUID, owner_id: str) -> RequestView:
        """Withdraw queued input before a worker takes it. Its user message stays in the full
        history (marked ``withdrawn``) and never reaches the model. Cancelling twice answers
        the same; a dispatched request is refused (cancel its run instead)."""
        async with self.sessions() as session, session.begin():
            requests = RunRequestRepository(session)
            found = await requests.get_owned(request_id, owner_id)
            # The worker claims under this lock too, so "queued" cannot change under us.
            await ConversationRepository(session).lock(
                found.thread_id, timeout_ms=self.lock_timeout_ms
            )
            request = await requests.get_owned(request_id, owner_id, for_update=True)
            if request.status == RequestStatus.DISPATCHED:
                raise RequestNotQueued("a run already took this request; cancel the run instead")
            if request.status == RequestStatus.QUEUED:
                await requests.withdraw(request_id)
                request = await requests.get_owned(request_id, owner_id)
            return RequestView(request, None)

    async def list(self, thread_id: uuid.UUID, owner_id: str, *, limit: int) -> Sequence[AgentRun]:
        async with self.sessions() as session:
            await ConversationRepository(session).get_owned(thread_id, owner_id)
            return await RunRepository(session).list_for_thread(thread_id, limit=limit)

    async def cancel(self, run_id: uuid.UUID, owner_id: str) -> AgentRun:
        async with self.sessions() as session, session.begin():
            runs = RunRepository(session)
            owned = await runs.get_owned(run_id, owner_id)
            await ConversationRepository(session).lock(
                owned.thread_id, timeout_ms=self.lock_timeout_ms
            )
            run = await runs.lock(run_id)
            assert run is not None
            if run.status == RunStatus.RUNNING and run.lease_holder is not None:
                # Its worker stops it and writes the outcome.
                await RunLeaseStatements(session).request_cancel(run_id)
            elif run.status in ACTIVE_RUN_STATUSES:
                # Interrupted, or resumed but not yet picked up: no worker to stop, end it here.
                await RunLeaseStatements(session).cancel(run_id, CANCELLED)
                # The thread is idle now: input queued behind the run is claimable.
                await runs.announce_work()
            else:
                raise InvalidState(f"run is already {run.status.value}")
            await session.flush()
            run = await runs.get(run_id)
            assert run is not None
        if self.on_cancel is not None:
            self.on_cancel(run_id)
        return run

    async def resume(
        self,
        run_id: uuid.UUID,
        owner_id: str,
        decisions: Sequence[ReviewDecision] | None,
        *,
        value: Any = None,
    ) -> AgentRun:
        """Answer an interrupted run: ``decisions`` for pending tool calls (a HITLRequest),
        ``value`` for a graph's own ``interrupt(value)`` (returned there as it is)."""
        async with self.sessions() as session, session.begin():
            runs = RunRepository(session)
            owned = await runs.get_owned(run_id, owner_id)
            conv = await ConversationRepository(session).lock(
                owned.thread_id, timeout_ms=self.lock_timeout_ms
            )
            run = await runs.lock(run_id)
            assert run is not None
            if run.status != RunStatus.INTERRUPTED:
                raise InvalidState(f"run is {run.status.value}, not interrupted")
            if self.require_agent is not None:
                self.require_agent(conv.agent_id)  # nothing resumes into a run it cannot do
            payload = self._resume_payload(run.interrupt, conv.agent_id, decisions, value)
            await RunLeaseStatements(session).resume(run_id, payload)
            await runs.announce_work()
            await session.flush()
            run = await runs.get(run_id)
            assert run is not None
        if self.on_resumed is not None:
            self.on_resumed()
        return run
