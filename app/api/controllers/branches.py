"""A thread's branches (issue 36): list them, answer a question again (Regenerate), replace a
question and everything after it (Edit). Both forks go through intake, as a LangGraph run from
an earlier checkpoint does; ListMessages reads any branch (``branch_id``)."""

from __future__ import annotations

import uuid

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.status_codes import HTTP_202_ACCEPTED

from app.api.branch_schemas import BranchOut, BranchPage, EditMessageIn, ForkOut, RegenerateIn
from app.api.errors import errors
from app.domain.errors import (
    AgentUnavailable,
    CheckpointNotForkable,
    CheckpointNotFound,
    NotFound,
    ThreadBusy,
    ValidationFailed,
)
from app.services.branches import BranchService
from app.services.intake import Accepted

FORK_ERRORS = errors(
    NotFound,
    ThreadBusy,
    CheckpointNotFound,
    CheckpointNotForkable,
    ValidationFailed,
    AgentUnavailable,
)


def fork_out(accepted: Accepted) -> ForkOut:
    assert accepted.branch_id is not None
    return ForkOut(
        request_id=accepted.request_id,
        message_id=accepted.message_id,
        branch_id=accepted.branch_id,
    )


class BranchController(Controller):
    path = "/v1/threads"
    tags = ["threads"]

    @get("/{thread_id:uuid}/branches", operation_id="ListBranches", responses=errors(NotFound))
    async def list_branches(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        branch_service: NamedDependency[BranchService],
    ) -> BranchPage:
        """Every branch of the thread's chat, the first (id: the thread's) first."""
        listing = await branch_service.list(thread_id, principal)
        first = BranchOut(
            id=thread_id,
            parent_id=None,
            fork_seq=0,
            kind="first",
            checkpoint_id=None,
            current=listing.current is None,
            created_at=None,
        )
        items = [first] + [
            BranchOut(
                id=b.id,
                parent_id=b.parent_id if b.parent_id is not None else thread_id,
                fork_seq=b.fork_seq,
                kind="edit" if b.kind == "edit" else "regenerate",
                checkpoint_id=b.checkpoint_id,
                current=listing.current == b.id,
                created_at=b.created_at,
            )
            for b in listing.branches
        ]
        return BranchPage(items=items)

    @post(
        "/{thread_id:uuid}/regenerate",
        operation_id="RegenerateAnswer",
        status_code=HTTP_202_ACCEPTED,
        responses=FORK_ERRORS,
    )
    async def regenerate(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        branch_service: NamedDependency[BranchService],
        data: RegenerateIn | None = None,
    ) -> ForkOut:
        """Answer a question again (default: the current branch's last one) as a new branch,
        the thread's current one from now on; the replaced answer stays readable on its branch.
        Only on an idle thread (409 `thread_busy` otherwise, nothing written)."""
        message_id = data.message_id if data is not None else None
        return fork_out(await branch_service.regenerate(thread_id, principal, message_id))

    @post(
        "/{thread_id:uuid}/messages/{message_id:uuid}/edit",
        operation_id="EditMessage",
        status_code=HTTP_202_ACCEPTED,
        responses=FORK_ERRORS,
    )
    async def edit(
        self,
        thread_id: uuid.UUID,
        message_id: uuid.UUID,
        data: EditMessageIn,
        principal: NamedDependency[str],
        branch_service: NamedDependency[BranchService],
    ) -> ForkOut:
        """Replace a user message (and everything after it) with new content, as a new branch
        run from the state before that message; the replaced turns stay readable on theirs.
        Only on an idle thread (409 `thread_busy` otherwise, nothing written)."""
        if not data.content.strip():
            raise ValidationFailed("content must not be blank", field="content")
        return fork_out(await branch_service.edit(thread_id, principal, message_id, data.content))
