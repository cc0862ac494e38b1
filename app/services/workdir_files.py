"""ReadWorkdirFile: the full original of an offloaded result, for its thread's owner only."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.compression.workdir import (
    Workdir,
    WorkdirError,
    WorkdirNotFoundError,
    WorkdirPathError,
    WorkdirStream,
)
from app.domain.errors import NotFound, ValidationFailed
from app.repositories.conversations import ConversationRepository


class WorkdirFileService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], workdir: Workdir) -> None:
        self.sessions = sessions
        self.workdir = workdir

    async def open(self, thread_id: uuid.UUID, owner_id: str, path: str) -> WorkdirStream:
        """The file's stored SHA-256 and size, and its bytes to stream (verified as they go)."""
        async with self.sessions() as session:
            await ConversationRepository(session).get_owned(thread_id, owner_id)
        try:
            return await self.workdir.open(str(thread_id), path)
        except WorkdirPathError as exc:
            raise ValidationFailed(str(exc)) from exc
        except WorkdirNotFoundError as exc:
            raise NotFound(str(exc)) from exc
        except WorkdirError as exc:  # unreadable (permissions, I/O): same answer, no internals
            raise NotFound(f"cannot read workdir file {path[:200]!r}") from exc
