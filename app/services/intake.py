"""Intake: a user message becomes a persisted Message plus a queued run request, atomically."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from app.agents.registry import AgentRegistry
from app.domain.errors import IdempotencyKeyReused
from app.repositories.intake import IntakeRepository


@dataclass(frozen=True, slots=True)
class Accepted:
    request_id: uuid.UUID
    message_id: uuid.UUID
    seq: int


def body_fingerprint(content: str) -> str:
    """SHA-256 of the PostMessage body's meaning (not its bytes: key order or spacing may vary)."""
    return hashlib.sha256(json.dumps({"content": content}).encode()).hexdigest()


class IntakeService:
    def __init__(
        self,
        engine: AsyncEngine,
        lock_timeout_ms: int,
        on_enqueued: Callable[[], None] | None = None,
        agents: AgentRegistry | None = None,
    ) -> None:
        self.engine = engine
        self.lock_timeout_ms = lock_timeout_ms
        self.on_enqueued = on_enqueued
        #: Refuses input for an agent that cannot run now (409 ``agent_unavailable``).
        self.agents = agents

    async def post_message(
        self,
        thread_id: uuid.UUID,
        owner_id: str,
        content: str,
        *,
        idempotency_key: str | None = None,
    ) -> Accepted:
        """Lock the thread row (the lock compress holds too), then message + request: the whole
        write is one statement (the hot path: PostMessage is hundreds per second per core).

        With an ``idempotency_key`` already used on this thread (looked up under the same lock,
        so two concurrent retries cannot both insert): the same body gets the first request
        back and nothing is written; another body is refused.
        """
        fingerprint = body_fingerprint(content) if idempotency_key is not None else None
        # One statement is its own transaction: autocommit saves the BEGIN and COMMIT round trips
        # (the statement commits or fails whole). A bare connection, no ORM Session: it has no
        # objects to track, and setting one up cost a tenth of PostMessage's CPU.
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            if self.agents is not None and self.agents.unavailable():
                # Only while some agent is down (an MCP server that does not answer): one more
                # query, so a post its agent cannot run is refused rather than failed later.
                agent_id = await IntakeRepository(conn).agent_of(thread_id, owner_id)
                if agent_id is not None:
                    self.agents.require_available(agent_id)
            row = await IntakeRepository(conn).accept_user_message(
                thread_id,
                owner_id,
                content,
                lock_timeout_ms=self.lock_timeout_ms,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
            )
        if row.replayed and row.fingerprint != fingerprint:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was used on this thread with another body"
            )
        if not row.replayed and self.on_enqueued is not None:
            self.on_enqueued()
        return Accepted(request_id=row.request_id, message_id=row.message_id, seq=row.seq)
