"""GetAgentState: the model-visible view, its next-turn pressure and what can be done about it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.agents.state_values import describe_message, plain_values
from app.compression.summary_messages import (
    is_summary_message,
    stacked_summary_text,
    summarized_count,
)
from app.compression.tokens import provider_ratio, request_base, scale
from app.domain.agents import DEFAULT_AGENT_ID
from app.repositories.agent_state import AgentStateRepository
from app.repositories.conversations import ConversationRepository

#: Manual compression is suggested from this share of ``summary_threshold`` on (display only).
SUGGEST_PERCENT = 85
#: Why a thread's pressure is null: its graph builds its model request without Threadkeeper.
NOT_COUNTED = (
    "graph_without_compression: the agent's graph does not call its model through "
    "Threadkeeper's compression, so its requests (prompt, tools) cannot be counted"
)


def compression_suggested(input_tokens: int, threshold: int) -> bool:
    """Integer arithmetic, so 84.9% is false and exactly 85% is true."""
    return input_tokens * 100 >= SUGGEST_PERCENT * threshold


@dataclass(frozen=True, slots=True)
class StateView:
    thread_id: uuid.UUID
    messages: list[dict[str, Any]]
    summary_present: bool
    summarized_messages: int
    summary_text: str | None
    input_tokens: int
    summary_threshold: int
    #: None when the next request cannot be counted (``pressure_reason`` says why).
    pressure: float | None
    compression_suggested: bool
    manual_available: bool
    manual_reason: str | None
    next: list[str]
    agent_id: str = DEFAULT_AGENT_ID
    #: Why the thread's agent cannot run (removed from the agents file, MCP server down).
    agent_unavailable: str | None = None
    pressure_reason: str | None = None
    #: The state's keys besides ``messages`` (a graph of the user's own keeps its own).
    values: dict[str, Any] = field(default_factory=dict)


class AgentStateService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], agents: AgentRegistry) -> None:
        self.sessions = sessions
        self.agents = agents

    async def view(self, thread_id: uuid.UUID, owner_id: str) -> StateView:
        async with self.sessions() as session:
            conversations = ConversationRepository(session)
            conv = await conversations.get_owned(thread_id, owner_id)
            status = await conversations.status(thread_id)
        unavailable = self.agents.unavailable_reason(conv.agent_id)
        if unavailable is not None:
            return await self._without_agent(thread_id, conv.agent_id, unavailable)
        agent = self.agents.runtime(conv.agent_id)
        info = self.agents.info(conv.agent_id)
        snapshot = await agent.state().get(thread_id)
        # The thread's own agent: its budget, its prompt and tool schemas in the count.
        compressor = agent.compressor
        threshold = compressor.summary_threshold
        tokens = compressor.count(
            snapshot.messages, system_message=agent.system_message, tools=agent.tools
        )
        if agent.own_graph:  # its prompt and tools are the graph's: as its last request had them
            ratio = provider_ratio(snapshot.messages)
            tokens += scale(request_base(snapshot.messages), ratio)
        # The summary may be several stacked segments at the head of the view.
        summary_present = any(is_summary_message(m) for m in snapshot.messages)
        summarized = summarized_count(snapshot.messages)
        # available means CompressContext would change the view (the compressor's own test).
        uncounted = None if agent.compression_opted_in else NOT_COUNTED
        if info is not None and not info.manual_compression:
            available, reason = False, "not_supported"
        elif status != "idle":
            available, reason = False, "thread_busy"
        elif not snapshot.messages:
            available, reason = False, "empty_history"
        elif not compressor.can_compress(
            snapshot.messages,
            thread_id=str(thread_id),
            system_message=agent.system_message,
            tools=agent.tools,
        ):
            available, reason = False, "nothing_to_compress"
        else:
            available, reason = True, None
        return StateView(
            thread_id=thread_id,
            messages=[describe_message(m) for m in snapshot.messages],
            summary_present=summary_present,
            summarized_messages=summarized,
            summary_text=stacked_summary_text(snapshot.messages),
            input_tokens=tokens,
            summary_threshold=threshold,
            pressure=None if uncounted else (round(tokens / threshold, 4) if threshold else 0.0),
            compression_suggested=not uncounted and compression_suggested(tokens, threshold),
            manual_available=available,
            manual_reason=reason,
            next=list(snapshot.next),
            agent_id=conv.agent_id,
            pressure_reason=uncounted,
            values=plain_values(snapshot.values),
        )

    async def _without_agent(self, thread_id: uuid.UUID, agent_id: str, why: str) -> StateView:
        """The thread's agent is gone: its view as stored, no pressure (no budget to measure
        against), manual compression unavailable with the reason."""
        snapshot = await AgentStateRepository(self.agents.state_graph).get(thread_id)
        return StateView(
            thread_id=thread_id,
            messages=[describe_message(m) for m in snapshot.messages],
            summary_present=any(is_summary_message(m) for m in snapshot.messages),
            summarized_messages=summarized_count(snapshot.messages),
            summary_text=stacked_summary_text(snapshot.messages),
            input_tokens=0,
            summary_threshold=0,
            pressure=0.0,
            compression_suggested=False,
            manual_available=False,
            manual_reason="agent_unavailable",
            next=list(snapshot.next),
            agent_id=agent_id,
            agent_unavailable=why,
        )
