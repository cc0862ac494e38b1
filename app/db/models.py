"""Typed SQLAlchemy models. Alembic owns every table here; the checkpointer owns its own.

A thread is stored as a ``conversations`` row; code calls its id ``thread_id`` (the attribute
maps the ``conversation_id`` column, so constraint and index strings below name the column).
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.domain.agents import DEFAULT_AGENT_ID
from app.domain.states import (
    MessageRole,
    RequestStatusName,
    RunErrorCode,
    RunStatusName,
)

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSONB, uuid.UUID: UUID(as_uuid=True)}


def _enum(cls: type[enum.Enum], name: str) -> Enum:
    return Enum(cls, name=name, values_callable=lambda e: [m.value for m in e])


class RequestStatus(enum.StrEnum):
    # Types ``.value`` as the Literal the API's schemas use: a mapper needs no cast.
    _value_: RequestStatusName
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    CANCELLED = "cancelled"


class RunStatus(enum.StrEnum):
    _value_: RunStatusName
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: Statuses that make a thread busy (and that the partial unique index allows once per thread).
ACTIVE_RUN_STATUSES = (RunStatus.RUNNING, RunStatus.INTERRUPTED)
#: Statuses a run never leaves.
TERMINAL_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
#: ``ACTIVE_RUN_STATUSES`` as the literal SQL of the partial unique index's predicate. A query
#: that must be served by that index repeats it verbatim: with bound parameters (``IN ($1,
#: $2)``) the planner cannot prove a generic plan covered by it and scans every finished run.
ACTIVE_RUN_SQL = "status IN ('running', 'interrupted')"
#: The predicate of the partial index of queued requests, for the same reason.
QUEUED_REQUEST_SQL = "status = 'queued'"


class Conversation(Base):
    """The thread. Its row is THE per-thread mutex (intake, worker claim and compress lock it)."""

    __tablename__ = "conversations"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    owner_id: Mapped[str] = mapped_column(String(200), index=True)
    agent_id: Mapped[str] = mapped_column(String(100), default=DEFAULT_AGENT_ID)
    #: False only for a LangGraph thread created without naming an assistant: its first run
    #: chooses the agent. Once chosen the agent is fixed (the one home of a thread's agent).
    agent_bound: Mapped[bool] = mapped_column(Boolean, default=True, server_default=text("true"))
    title: Mapped[str] = mapped_column(String(500), default="")
    #: Next per-conversation message sequence number (incremented under the row lock).
    next_message_seq: Mapped[int] = mapped_column(BigInteger, default=1, server_default="1")
    next_request_seq: Mapped[int] = mapped_column(BigInteger, default=1, server_default="1")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )
    #: The current branch of the thread's chat (``thread_branches``; None: its first branch).
    branch_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    #: The client's own JSON object (column ``metadata``; the name is reserved on declarative
    #: classes). ListThreads filters it by containment (``@>``, GIN index).
    meta: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, default=dict, server_default=text("'{}'::jsonb")
    )

    __table_args__ = (
        Index("ix_conversations_owner_created", "owner_id", "created_at"),
        Index(
            "ix_conversations_metadata",
            "metadata",
            postgresql_using="gin",
            postgresql_ops={"metadata": "jsonb_path_ops"},
        ),
    )


class Message(Base):
    """Full, append-only chat record. Compression never rewrites these rows."""

    __tablename__ = "messages"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    thread_id: Mapped[uuid.UUID] = mapped_column(
        "conversation_id", ForeignKey("conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(BigInteger)
    role: Mapped[MessageRole] = mapped_column(String(20))
    content: Mapped[str] = mapped_column(Text)
    #: LangChain message id, so a message is persisted once even if a run is replayed.
    lc_id: Mapped[str | None] = mapped_column(String(200))
    tool_calls: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    tool_call_id: Mapped[str | None] = mapped_column(String(200))
    tool_name: Mapped[str | None] = mapped_column(String(200))
    run_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    #: User messages: the run request they queued (its run answers them; runs carry request_id).
    request_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    #: The branch the message was written on (None: the thread's first branch).
    branch_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        UniqueConstraint("conversation_id", "seq", name="uq_messages_conversation_seq"),
        Index(
            "uq_messages_conversation_lc_id",
            "conversation_id",
            "lc_id",
            unique=True,
            postgresql_where=text("lc_id IS NOT NULL"),
        ),
    )


class ThreadBranch(Base):
    """A branch of a thread's chat, made by a run from an earlier checkpoint (Edit: new input
    there; Regenerate: the answer again). Its chat: the chat of ``parent_id`` (None: the
    thread's first branch) up to message ``fork_seq`` (0: none of it), then its own messages.
    Nothing is ever rewritten: the branch it replaced stays readable."""

    __tablename__ = "thread_branches"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    thread_id: Mapped[uuid.UUID] = mapped_column(
        "conversation_id", ForeignKey("conversations.id", ondelete="CASCADE")
    )
    parent_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    fork_seq: Mapped[int] = mapped_column(BigInteger)
    #: The checkpoint the branch's first run started from.
    checkpoint_id: Mapped[str] = mapped_column(String(200))
    #: ``edit`` (new input) or ``regenerate`` (no input: the answer again).
    kind: Mapped[str] = mapped_column(String(20))
    #: The run request that made it.
    request_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (Index("ix_thread_branches_conversation", "conversation_id", "created_at"),)


class AgentRunRequest(Base):
    """Per-thread FIFO of user inputs not yet started."""

    __tablename__ = "agent_run_requests"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    thread_id: Mapped[uuid.UUID] = mapped_column(
        "conversation_id", ForeignKey("conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(BigInteger)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    status: Mapped[RequestStatus] = mapped_column(
        _enum(RequestStatus, "request_status"), default=RequestStatus.QUEUED
    )
    #: PostMessage's ``Idempotency-Key`` (unique per thread, so per principal too) and the
    #: SHA-256 of the body it came with: a replay returns this request, another body is refused.
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    idempotency_fingerprint: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        UniqueConstraint("conversation_id", "seq", name="uq_requests_conversation_seq"),
        Index(
            "uq_requests_conversation_idempotency_key",
            "conversation_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index(
            "ix_requests_queued",
            "conversation_id",
            "seq",
            postgresql_where=text(QUEUED_REQUEST_SQL),
        ),
    )


class AgentRun(Base):
    __tablename__ = "agent_runs"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    thread_id: Mapped[uuid.UUID] = mapped_column(
        "conversation_id", ForeignKey("conversations.id", ondelete="CASCADE")
    )
    request_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_run_requests.id"))
    status: Mapped[RunStatus] = mapped_column(_enum(RunStatus, "run_status"))
    lease_holder: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: Set by ResumeRun; the worker picks the run up again and clears it.
    resume_payload: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    cancel_requested: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=text("false")
    )
    interrupt: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    #: Sanitized, fixed text for clients (never a provider's or driver's message).
    error: Mapped[str | None] = mapped_column(Text)
    #: Stable reason: provider_error, context_overflow, database_unavailable, tool_error, ...
    error_code: Mapped[RunErrorCode | None] = mapped_column(String(50))
    #: ``provider_error``: the HTTP status the provider answered (null: none, e.g. refused).
    provider_status: Mapped[int | None] = mapped_column(Integer)
    #: ``provider_error``: the provider's own error code (never its free text).
    provider_code: Mapped[str | None] = mapped_column(String(64))
    input_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    model_calls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index(
            "uq_agent_runs_one_active_per_thread",
            "conversation_id",
            unique=True,
            postgresql_where=text(ACTIVE_RUN_SQL),
        ),
        Index("ix_agent_runs_conversation_created", "conversation_id", "created_at"),
        # The foreign key's own index: deleting a request (DeleteThread cascades them) makes
        # PostgreSQL look for runs referencing it, and GetRequest looks its run up by it.
        Index("ix_agent_runs_request_id", "request_id"),
        # The run-event prune looks for runs that finished before a cut-off.
        Index("ix_agent_runs_finished_at", "finished_at"),
    )


class RunEvent(Base):
    """Events of a run, persisted so SSE works across processes and can resume (Last-Event-ID)."""

    __tablename__ = "run_events"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("agent_runs.id", ondelete="CASCADE"), primary_key=True
    )
    type: Mapped[str] = mapped_column(String(50))
    data: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    # Reads are by run (after a cursor id): the primary key is that index (0009_i23_wal).
    __table_args__ = (PrimaryKeyConstraint("run_id", "id", name="pk_run_events"),)


class KbDocument(Base):
    __tablename__ = "kb_documents"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    kb: Mapped[str] = mapped_column(String(100), index=True)
    owner_id: Mapped[str] = mapped_column(String(200))
    title: Mapped[str] = mapped_column(String(500))
    source: Mapped[str] = mapped_column(String(500), default="")
    url: Mapped[str] = mapped_column(String(2000), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class KbChunk(Base):
    __tablename__ = "kb_chunks"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    document_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("kb_documents.id", ondelete="CASCADE"), index=True
    )
    kb: Mapped[str] = mapped_column(String(100))
    chunk_index: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text)
    tsv: Mapped[Any] = mapped_column(TSVECTOR)

    __table_args__ = (
        Index("ix_kb_chunks_tsv", "tsv", postgresql_using="gin"),
        Index("ix_kb_chunks_kb", "kb"),
    )


class WorkdirIndexEntry(Base):
    """One offloaded original of a thread's Workdir (the thread's recall index, append-only).

    ``thread_key`` is the Workdir's folder name of the thread (``Workdir.thread_key``), so the
    index and the files name a thread the same way on every backend. ``entry`` is the JSON line
    the thread's ``index.jsonl`` shows; ``tsv`` holds the original's terms (``app.compression.terms``)
    as lexemes, searched by ``search_workdir``.
    """

    __tablename__ = "workdir_index"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    thread_key: Mapped[str] = mapped_column(String(200))
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    entry: Mapped[dict[str, Any]] = mapped_column()
    tsv: Mapped[Any] = mapped_column(TSVECTOR)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        UniqueConstraint("thread_key", "path", name="uq_workdir_index_thread_key_path"),
        Index("ix_workdir_index_tsv", "tsv", postgresql_using="gin"),
    )
