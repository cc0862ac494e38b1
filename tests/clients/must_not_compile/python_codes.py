"""Must NOT type-check: tests/integration/test_generated_clients.py requires ``mypy --strict``
to reject exactly the two marked lines. ResumeRun's 409 body has an enum of the three codes
ResumeRun declares there: no ``REQUEST_NOT_QUEUED`` member (CancelRequest's 409), and a match
that leaves ``AGENT_UNAVAILABLE`` out is not exhaustive."""

from __future__ import annotations

from typing import assert_never

from threadkeeper_client.models import (
    ThreadBusyOrInvalidStateOrAgentUnavailableCode,
    ThreadBusyOrInvalidStateOrAgentUnavailableError,
)


def conflict(error: ThreadBusyOrInvalidStateOrAgentUnavailableError) -> str:
    code = ThreadBusyOrInvalidStateOrAgentUnavailableCode
    match error.error:
        case code.THREAD_BUSY | code.INVALID_STATE:
            return "retry, or the run is not waiting for a decision"
        case code.REQUEST_NOT_QUEUED:  # expected: attr-defined
            return "never"
        case _:
            assert_never(error.error)  # expected: arg-type (AGENT_UNAVAILABLE is left out)
