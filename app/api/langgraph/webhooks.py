"""A LangGraph run's ``webhook``: the run, as GetRun shows it once it has ended, with its final
``values`` (as /wait answers), POSTed to the URL the run was created with.

The URL is checked when the run is created (``check_webhook``): http(s) only, and its host
must not be (or resolve to) a loopback, link-local, private or otherwise non-public address
unless ``THREADKEEPER_WEBHOOK_ALLOW_PRIVATE`` is set (a client must not make the server call
its own network); it is checked again just before each POST (the name may resolve elsewhere
by then). Delivery follows the run from the process that accepted it (woken by the run's
events, like a join); each POST has ``THREADKEEPER_WEBHOOK_TIMEOUT_SECONDS``, and a connection
error, a timeout, 429 or 5xx is retried with backoff, ``THREADKEEPER_WEBHOOK_ATTEMPTS`` in all.
A process that stops before the run ends does not deliver it (the run itself is not lost).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
import structlog
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from app.config import HttpSettings
from app.domain.errors import WebhookRefused
from app.services.langgraph.runs import LangGraphRun, LangGraphRunService
from app.services.langgraph.stream import LangGraphStreams

from .parts import Cursor, final_values, stream_parts
from .presenters import run_out

log = structlog.get_logger(__name__)

#: Seconds between keep-alives of the stream the delivery follows (nothing is sent on them).
_FOLLOW_KEEPALIVE = 30.0


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not (ip.is_loopback or ip.is_link_local or ip.is_private)


async def check_webhook(url: str, *, allow_private: bool) -> None:
    """``WebhookRefused`` unless ``url`` is an http(s) URL whose host is (and resolves only
    to) public addresses, or ``allow_private``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefused(f"webhook must be an http(s) URL, not {url[:200]!r}")
    if parts.username or parts.password:
        raise WebhookRefused("webhook must not carry credentials in its URL")
    if allow_private:
        return
    host = parts.hostname
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host,
                parts.port or (443 if parts.scheme == "https" else 80),
                type=socket.SOCK_STREAM,
            )
        except OSError as exc:
            raise WebhookRefused(f"webhook host {host!r} does not resolve") from exc
        addresses = sorted({str(info[4][0]) for info in infos})
    blocked = [a for a in addresses if not _public(a)]
    if blocked or not addresses:
        raise WebhookRefused(
            f"webhook host {host!r} is (or resolves to) a loopback, link-local or private "
            f"address ({', '.join(blocked)}); THREADKEEPER_WEBHOOK_ALLOW_PRIVATE allows it"
        )


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code == 429 or exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


class Webhooks:
    """The deliveries this process has in flight (stopped when the app stops)."""

    def __init__(self, settings: HttpSettings) -> None:
        self.settings = settings
        self._tasks: set[asyncio.Task[None]] = set()
        self.stop = asyncio.Event()

    async def check(self, url: str) -> None:
        await check_webhook(url, allow_private=self.settings.webhook_allow_private)

    def deliver_when_done(
        self,
        url: str,
        run: LangGraphRun,
        owner_id: str,
        runs: LangGraphRunService,
        streams: LangGraphStreams,
    ) -> None:
        task = asyncio.create_task(self._deliver(url, run, owner_id, runs, streams))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        self.stop.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _deliver(
        self,
        url: str,
        run: LangGraphRun,
        owner_id: str,
        runs: LangGraphRunService,
        streams: LangGraphStreams,
    ) -> None:
        bound = log.bind(run_id=str(run.run_id), thread_id=str(run.thread_id))
        try:
            parts = stream_parts(
                streams,
                run,
                owner_id,
                ["values"],
                after=Cursor(),
                with_ids=False,
                keepalive=_FOLLOW_KEEPALIVE,
                stop=self.stop,
            )
            values = await final_values(parts)
            if self.stop.is_set():
                return
            ended = await runs.get(run.thread_id, run.run_id, owner_id)
            body = msgspec.to_builtins(run_out(ended))
            body["values"] = msgspec.to_builtins(values)
            await self._post(url, body)
            bound.info("webhook_delivered", status=ended.status)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a webhook never fails anything else
            bound.warning("webhook_failed", error=type(exc).__name__, detail=str(exc)[:300])

    async def _post(self, url: str, body: dict[str, Any]) -> None:
        await self.check(url)  # again: the name may resolve elsewhere by now
        timeout = httpx.Timeout(self.settings.webhook_timeout_seconds)
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.settings.webhook_attempts),
                wait=wait_exponential(multiplier=0.5, max=10),
                retry=retry_if_exception(_retryable),
                reraise=True,
            ):
                with attempt:
                    response = await client.post(url, json=body)
                    response.raise_for_status()
