"""/v1's time travel (issue 36): a thread's branches, reading any of them, Regenerate (an
answer again) and Edit (message N replaced), through the same intake use case as the LangGraph
door's runs from a checkpoint (``IntakeService.fork``).

/v1 names a message, not a checkpoint: the checkpoint is the one Agent Chat UI sends for the
same action. The oldest state holding the question is the one its input was applied in:
Regenerate re-runs from there, Edit starts from its parent (before that input).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.db.models import Message, ThreadBranch
from app.domain.errors import CheckpointNotFound, NotFound, ThreadBusy, ValidationFailed
from app.repositories.branches import BranchRepository, lineage_of
from app.repositories.conversations import ConversationRepository
from app.repositories.messages import MessageRepository
from app.services.forks import ForkAsk
from app.services.intake import Accepted, IntakeService

#: The most checkpoints looked through for a question's state.
MAX_STATES = 10_000


@dataclass(frozen=True, slots=True)
class BranchListing:
    #: The thread's branches oldest first (its first branch is not a row: its id is the thread's).
    branches: Sequence[ThreadBranch]
    current: uuid.UUID | None


class BranchService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        intake: IntakeService,
        agents: AgentRegistry,
    ) -> None:
        self.sessions = sessions
        self.intake = intake
        self.agents = agents

    async def list(self, thread_id: uuid.UUID, owner_id: str) -> BranchListing:
        async with self.sessions() as session:
            await ConversationRepository(session).get_owned(thread_id, owner_id)
            repo = BranchRepository(session)
            return BranchListing(await repo.list(thread_id), await repo.current(thread_id))

    async def regenerate(
        self, thread_id: uuid.UUID, owner_id: str, message_id: uuid.UUID | None
    ) -> Accepted:
        """The answer to user message ``message_id`` (default: the current branch's last
        question) again, as a new branch."""
        question, agent_id = await self._question(thread_id, owner_id, message_id)
        checkpoint = await self._applied_checkpoint(thread_id, agent_id, question)
        return await self.intake.fork(thread_id, owner_id, ForkAsk(checkpoint, None))

    async def edit(
        self, thread_id: uuid.UUID, owner_id: str, message_id: uuid.UUID, content: str
    ) -> Accepted:
        """User message ``message_id`` replaced by ``content`` (and everything after it), as a
        new branch: the run starts from the state before that message."""
        question, agent_id = await self._question(thread_id, owner_id, message_id)
        checkpoint = await self._applied_checkpoint(thread_id, agent_id, question, parent=True)
        return await self.intake.fork(thread_id, owner_id, ForkAsk(checkpoint, content))

    async def _question(
        self, thread_id: uuid.UUID, owner_id: str, message_id: uuid.UUID | None
    ) -> tuple[Message, str]:
        """A user message of the thread's current branch (its last one when None), and the
        thread's agent."""
        async with self.sessions() as session:
            conversations = ConversationRepository(session)
            conv = await conversations.get_owned(thread_id, owner_id)
            # Checked again under the row lock by the fork itself; here first, so a busy
            # thread is 409 before its queued input is taken for the question.
            if await conversations.status(thread_id) != "idle":
                raise ThreadBusy("the thread has a run or queued input; fork it when idle")
            repo = BranchRepository(session)
            lineage = lineage_of(await repo.list(thread_id), await repo.current(thread_id))
            rows = await MessageRepository(session).list(
                thread_id, limit=1_000_000, lineage=lineage
            )
        asked = [m for m in rows if m.role == "user"]
        if message_id is None:
            if not asked:
                raise ValidationFailed(
                    "the thread has no question to answer again", field="message_id"
                )
            return asked[-1], conv.agent_id
        found = next((m for m in rows if m.id == message_id), None)
        if found is None:
            raise NotFound(f"message {message_id} is not on the thread's current branch")
        if found.role != "user":
            raise ValidationFailed("name a user message", field="message_id")
        return found, conv.agent_id

    async def _applied_checkpoint(
        self, thread_id: uuid.UUID, agent_id: str, question: Message, *, parent: bool = False
    ) -> str:
        """The checkpoint ``question`` was applied in (``parent``: the one before it)."""
        states = await self.agents.state_of(agent_id).history(thread_id, limit=MAX_STATES)
        holding = [s for s in states if any(str(m.id) == question.lc_id for m in s.messages)]
        if not holding:
            raise CheckpointNotFound(
                "no checkpoint of the thread holds that message (its run has not started, or "
                "its state is not kept)"
            )
        applied = holding[-1]
        checkpoint = applied.parent_checkpoint_id if parent else applied.checkpoint_id
        if checkpoint is None:
            raise CheckpointNotFound("the state before that message is not kept")
        return checkpoint
