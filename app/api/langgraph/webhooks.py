"""A LangGraph run's ``webhook``: the run, as GetRun shows it once it has ended, with its final
``values`` (as /wait answers), POSTed to the URL the run was created with.

The URL is checked when the run is created (``check_webhook``): http(s) only, and its host
must not be (or resolve to) a loopback, link-local, private or otherwise non-public address
unless ``THREADKEEPER_WEBHOOK_ALLOW_PRIVATE`` is set (a client must not make the server call
its own network); it is checked again just before each POST (the name may resolve elsewhere
by then), and the POST connects to the address that check accepted (``pinned_request``). Delivery follows the run from the process that accepted it (woken by the run's
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


#: NAT64's well-known prefix: its last 32 bits are an IPv4 address (RFC 6052).
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64, IPv4-compatible)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_site_local:
            return False
        inner = _embedded_v4(ip)
        if inner is not None and not _public(str(inner)):
            return False
    return ip.is_global and not (ip.is_loopback or ip.is_link_local or ip.is_private)


async def check_webhook(url: str, *, allow_private: bool) -> str | None:
    """``WebhookRefused`` unless ``url`` is an http(s) URL whose host is (and resolves only
    to) public addresses, or ``allow_private``; the checked address to connect to (None with
    ``allow_private``: the name is resolved as usual)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefused(f"webhook must be an http(s) URL, not {url[:200]!r}")
    if parts.username or parts.password:
        raise WebhookRefused("webhook must not carry credentials in its URL")
    if allow_private:
        return None
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
    return addresses[0]


def pinned_request(url: str, address: str | None) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL, headers and httpx extensions that reach ``url``'s host at the checked
    ``address`` (so a name that resolves elsewhere a moment later, DNS rebinding, is never
    connected to), keeping its ``Host`` header and its TLS server name."""
    if address is None:
        return url, {}, {}
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    netloc = f"{host}:{parts.port}" if parts.port else host
    pinned = parts._replace(netloc=netloc).geturl()
    extensions: dict[str, Any] = {}
    if parts.scheme == "https":
        extensions["sni_hostname"] = parts.hostname
    return pinned, {"Host": parts.netloc}, extensions


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

    async def check(self, url: str) -> str | None:
        return await check_webhook(url, allow_private=self.settings.webhook_allow_private)

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
        timeout = httpx.Timeout(self.settings.webhook_timeout_seconds)
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.settings.webhook_attempts),
                wait=wait_exponential(multiplier=0.5, max=10),
                retry=retry_if_exception(_retryable),
                reraise=True,
            ):
                with attempt:
                    # Checked again before each attempt (the name may resolve elsewhere by
                    # now), and the connection goes to the address just checked.
                    target, headers, extensions = pinned_request(url, await self.check(url))
                    # Streamed and never read: the receiver's answer is its status only
                    # (an endless body must not hold memory or the task).
                    async with client.stream(
                        "POST", target, json=body, headers=headers, extensions=extensions
                    ) as response:
                        response.raise_for_status()
