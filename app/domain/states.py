"""The state vocabularies, each spelled once.

The ORM (app/db/models.py: its enums declare ``_value_`` as these Literals) and the API's schemas
(app/api/schemas.py) both use them, so a row's status goes into a response with no cast, and the
OpenAPI document lists the same values the database holds (tests/unit/test_error_codes.py).
"""

from __future__ import annotations

from typing import Literal

RequestStatusName = Literal["queued", "dispatched", "cancelled"]
RunStatusName = Literal["running", "interrupted", "completed", "failed", "cancelled"]
#: Why a run failed or was cancelled (app/worker/errors.py; a unit test keeps them equal).
RunErrorCode = Literal[
    "provider_error",
    "context_overflow",
    "database_unavailable",
    "tool_error",
    "internal_error",
    "lease_expired",
    "worker_stopped",
    "cancelled",
    "agent_unavailable",
    "graph_error",
    "superseded",
]
#: A thread's computed status (ConversationRepository.statuses): idle, its active run's status,
#: or queued (input waits and no run is active).
ThreadStatus = Literal["idle", "running", "interrupted", "queued"]
MessageRole = Literal["user", "assistant", "tool"]
#: A branch of a thread's chat: its first, or one made by Edit or Regenerate (issue 36).
BranchKind = Literal["first", "edit", "regenerate"]
#: A run's ``status`` events: its statuses plus ``resumed`` (an interrupted run was answered).
RunEventStatus = Literal["running", "interrupted", "resumed", "completed", "failed", "cancelled"]
#: Why the model view was compressed: automatically (the threshold was reached, or the provider
#: reported an overflow) or on request (CompressContext).
CompressionReason = Literal["threshold", "overflow", "manual"]
#: What became of a model call that a provider failed transiently (``ProviderRetryEvent``).
ProviderRetryOutcome = Literal["retrying", "gave_up"]
#: The answers ResumeRun takes for one pending tool call (langchain's ``DecisionType``).
DecisionType = Literal["approve", "reject", "edit", "respond"]
#: A message's type in the agent's model view (langchain's message types).
StateMessageType = Literal["human", "ai", "tool", "system"]
