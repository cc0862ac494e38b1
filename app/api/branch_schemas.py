"""/v1's shapes for a thread's branches, Regenerate and Edit (issue 36)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

import msgspec

from app.api.schemas import Strict
from app.domain.states import BranchKind


class BranchOut(msgspec.Struct, kw_only=True):
    """A branch of the thread's chat. The first branch's id is the thread's; every other one
    was made by Regenerate or Edit (or a LangGraph run from an earlier checkpoint)."""

    id: uuid.UUID
    #: The branch it forked from (None: the thread's first branch).
    parent_id: uuid.UUID | None
    #: The last message (seq) of the parent's chat the branch keeps (0: none).
    fork_seq: int
    kind: BranchKind
    #: The LangGraph checkpoint its first run started from (None: the first branch).
    checkpoint_id: str | None
    #: Whether it is the thread's current branch (what ListMessages and the state show).
    current: bool
    created_at: datetime | None


class BranchPage(msgspec.Struct, kw_only=True):
    items: list[BranchOut]


class RegenerateIn(Strict):
    #: The user message whose answer is made again (default: the current branch's last one).
    message_id: uuid.UUID | None = None


class EditMessageIn(Strict):
    content: Annotated[str, msgspec.Meta(min_length=1, max_length=200_000)]


class ForkOut(msgspec.Struct, kw_only=True):
    request_id: uuid.UUID
    #: The user message the new run answers (Edit: the new one; Regenerate: the one answered
    #: again).
    message_id: uuid.UUID
    #: The new branch, now the thread's current one.
    branch_id: uuid.UUID
    status: Literal["queued"] = "queued"
