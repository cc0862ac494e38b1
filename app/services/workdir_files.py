"""ReadWorkdirFile: the full original of an offloaded result, for its thread's owner only."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.workdir import Workdir, WorkdirError, WorkdirNotFoundError, WorkdirPathError
from app.repositories.conversations import ConversationRepository
from app.services.errors import NotFound, ValidationFailed


@dataclass(frozen=True, slots=True)
class WorkdirFile:
    text: str
    sha256: str
    total_chars: int


class WorkdirFileService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], workdir: Workdir) -> None:
        self.sessions = sessions
        self.workdir = workdir

    async def read(self, thread_id: uuid.UUID, owner_id: str, path: str) -> WorkdirFile:
        async with self.sessions() as session:
            await ConversationRepository(session).get_owned(thread_id, owner_id)
        try:
            text, total, sha = await asyncio.to_thread(self.workdir.read_text, str(thread_id), path)
        except WorkdirPathError as exc:
            raise ValidationFailed(str(exc)) from exc
        except WorkdirNotFoundError as exc:
            raise NotFound(str(exc)) from exc
        except WorkdirError as exc:  # unreadable (permissions, I/O): same answer, no internals
            raise NotFound(f"cannot read workdir file {path[:200]!r}") from exc
        return WorkdirFile(text=text, sha256=sha, total_chars=total)
