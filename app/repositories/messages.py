"""The full, append-only chat record."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Message
from app.repositories.branches import Lineage
from app.repositories.conversations import ConversationRepository


@dataclass(frozen=True, slots=True)
class NewMessage:
    role: str
    content: str
    lc_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    run_id: uuid.UUID | None = None
    #: For a user message: the run request it queued (pairs the question with its run).
    request_id: uuid.UUID | None = None


class MessageRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.conversations = ConversationRepository(session)

    async def append(self, thread_id: uuid.UUID, items: Sequence[NewMessage]) -> list[Message]:
        """Append in order; a message whose LangChain id is already stored is skipped (idempotent)."""
        lc_ids = [m.lc_id for m in items if m.lc_id]
        known: set[str] = set()
        if lc_ids:
            rows = await self.session.scalars(
                select(Message.lc_id).where(
                    Message.thread_id == thread_id, Message.lc_id.in_(lc_ids)
                )
            )
            known = {r for r in rows if r}
        fresh: list[NewMessage] = []
        seen: set[str] = set()
        for m in items:
            if m.lc_id and (m.lc_id in known or m.lc_id in seen):
                continue
            if m.lc_id:
                seen.add(m.lc_id)
            fresh.append(m)
        if not fresh:
            return []
        first, branch_id = await self.conversations.allocate_message_seqs(thread_id, len(fresh))
        rows_out = [
            Message(
                id=uuid.uuid4(),
                thread_id=thread_id,
                seq=first + i,
                role=m.role,
                content=m.content,
                lc_id=m.lc_id,
                tool_calls=m.tool_calls,
                tool_call_id=m.tool_call_id,
                tool_name=m.tool_name,
                run_id=m.run_id,
                request_id=m.request_id,
                branch_id=branch_id,
            )
            for i, m in enumerate(fresh)
        ]
        self.session.add_all(rows_out)
        await self.session.flush()
        return rows_out

    async def first_of_threads(self, thread_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Message]:
        """Each thread's first message (one query: what a list of threads shows)."""
        if not thread_ids:
            return {}
        rows = await self.session.scalars(
            select(Message)
            .where(Message.thread_id.in_(list(thread_ids)))
            .ext(distinct_on(Message.thread_id))
            .order_by(Message.thread_id, Message.seq)
        )
        return {m.thread_id: m for m in rows}

    async def get(self, message_id: uuid.UUID) -> Message | None:
        return await self.session.get(Message, message_id)

    async def list(
        self,
        thread_id: uuid.UUID,
        *,
        after_seq: int = 0,
        limit: int = 100,
        lineage: Lineage | None = None,
    ) -> Sequence[Message]:
        """In order; only the chat of one branch when ``lineage`` is given (else every
        branch's messages)."""
        query = select(Message).where(Message.thread_id == thread_id, Message.seq > after_seq)
        if lineage is not None:
            query = query.where(lineage.where())
        return (await self.session.scalars(query.order_by(Message.seq).limit(limit))).all()

    async def tool_results(
        self, thread_id: uuid.UUID, tool_call_ids: Sequence[str]
    ) -> dict[str, Message]:
        """The thread's stored tool results for these tool calls (the first of each)."""
        if not tool_call_ids:
            return {}
        rows = await self.session.scalars(
            select(Message)
            .where(
                Message.thread_id == thread_id,
                Message.role == "tool",
                Message.tool_call_id.in_(list(tool_call_ids)),
            )
            .order_by(Message.seq)
        )
        found: dict[str, Message] = {}
        for m in rows:
            if m.tool_call_id is not None:
                found.setdefault(m.tool_call_id, m)
        return found

    async def by_lc_ids(self, thread_id: uuid.UUID, lc_ids: Sequence[str]) -> dict[str, Message]:
        """The thread's messages with these LangChain ids (on any branch)."""
        if not lc_ids:
            return {}
        rows = await self.session.scalars(
            select(Message).where(Message.thread_id == thread_id, Message.lc_id.in_(list(lc_ids)))
        )
        return {m.lc_id: m for m in rows if m.lc_id}
