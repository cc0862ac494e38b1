"""What is retried, how long it waits, and how many runs a worker takes on (issue 34), from real
exception objects and real clocks, no database."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

from app.agents.middlewares.provider_retry import ProviderRetryMiddleware
from app.agents.provider_errors import is_transient, provider_code, retry_after
from app.worker.admission import FLOOR, Admission


def status_error(
    status: int, code: str | None = None, headers: dict[str, str] | None = None
) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    body = {"error": {"message": "m", "type": "t", "code": code}}
    response = httpx.Response(status, json=body, headers=headers or {}, request=request)
    return openai.APIStatusError(f"Error code: {status}", response=response, body=body)


@pytest.mark.parametrize(
    ("status", "code", "transient"),
    [
        (429, "rate_limit_exceeded", True),
        (429, "insufficient_quota", False),  # no wait refills a quota
        (500, None, True),
        (503, "overloaded", True),
        (529, "overloaded_error", True),
        (408, None, True),
        (400, None, False),
        (401, "invalid_api_key", False),
        (403, None, False),
        (404, "model_not_found", False),
        (422, None, False),
        (400, "context_length_exceeded", False),  # summarized instead
    ],
)
def test_which_statuses_are_transient(status: int, code: str | None, transient: bool) -> None:
    assert is_transient(status_error(status, code)) is transient


def test_connection_failures_are_transient_and_other_errors_are_not() -> None:
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    assert is_transient(openai.APIConnectionError(request=request))
    assert is_transient(openai.APITimeoutError(request=request))
    assert not is_transient(ValueError("a bug of ours"))
    assert not is_transient(RuntimeError("tool failed"))


def test_retry_after_in_seconds_milliseconds_or_a_date() -> None:
    assert retry_after(status_error(429, headers={"retry-after": "3"})) == 3.0
    assert retry_after(status_error(429, headers={"retry-after-ms": "250"})) == 0.25
    later = retry_after(status_error(429, headers={"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"}))
    assert later is None  # decades away: not honoured (the call gives up instead)
    assert retry_after(status_error(429)) is None
    assert provider_code(status_error(429, "rate_limit_exceeded")) == "rate_limit_exceeded"


def test_the_wait_honours_retry_after_else_backs_off_with_jitter() -> None:
    retry = ProviderRetryMiddleware(model="openai:m")
    assert retry.delay(1, status_error(429, headers={"retry-after": "7"})) == 7.0
    plain = status_error(503)
    for attempt, base in ((1, 0.5), (2, 1.0), (3, 2.0), (9, 20.0)):
        waits = {retry.delay(attempt, plain) for _ in range(50)}
        assert all(0.75 * base <= w <= 1.25 * base for w in waits), (attempt, waits)
        assert len(waits) > 1  # jittered


async def test_admission_takes_runs_up_to_the_cap_and_none_while_the_loop_lags() -> None:
    gate = Admission(limit=6, max_lag_seconds=0.05)
    for _ in range(6):
        assert gate.admits()
        gate.taken()
    assert not gate.admits()  # the cap
    gate.done()
    assert gate.admits()
    gate.lag = 0.2  # the loop runs late: no new run ...
    assert not gate.admits()
    while gate.active > FLOOR - 1:
        gate.done()
    assert gate.admits()  # ... except up to the floor, whatever the lag


async def test_admission_measures_the_loops_lag() -> None:
    gate = Admission(limit=10, max_lag_seconds=0.05)
    gate.start()
    try:
        for _ in range(5):
            await asyncio.sleep(0.06)
            time.sleep(0.3)  # noqa: ASYNC251 - a callback that hogs the loop, on purpose
        assert gate.lag > 0.05
    finally:
        await gate.stop()


def test_admission_takes_no_run_while_the_database_pools_are_pressed() -> None:
    pressed = [True]
    gate = Admission(limit=100, max_lag_seconds=0.25, pressed=lambda: pressed[0])
    for _ in range(FLOOR):
        assert gate.admits()  # the floor, pressed or not
        gate.taken()
    assert not gate.admits()
    pressed[0] = False
    assert gate.admits()
