"""A webhook's target: which addresses count as the server's own network, and the POST that
goes to the address the check accepted (never to what the name resolves to a moment later)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from app.api.langgraph.webhooks import _public, check_webhook, pinned_request
from app.domain.errors import WebhookRefused


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("169.254.169.254", False),
        ("::1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 of 169.254.169.254
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        ("::127.0.0.1", False),  # IPv4-compatible
        ("fec0::1", False),  # site-local
        ("fe80::1%eth0", False),
    ],
)
def test_public_addresses(address: str, public: bool) -> None:
    assert _public(address) is public


async def test_a_name_is_checked_by_what_it_resolves_to() -> None:
    with pytest.raises(WebhookRefused, match="resolves to"):
        await check_webhook("http://localhost:9/hook", allow_private=False)
    assert await check_webhook("http://localhost:9/hook", allow_private=True) is None
    assert await check_webhook("https://93.184.216.34/hook", allow_private=False) == (
        "93.184.216.34"
    )


class _Hook(BaseHTTPRequestHandler):
    seen: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        _Hook.seen.append(self.headers["host"])
        self.send_response(204)
        self.end_headers()


@pytest.fixture
def hook() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


async def test_the_post_goes_to_the_checked_address_with_the_original_host(hook: int) -> None:
    # ``.invalid`` never resolves (RFC 2606): the request can only have reached the server
    # through the pinned address.
    url = f"http://hooks.example.invalid:{hook}/done?x=1"
    target, headers, extensions = pinned_request(url, "127.0.0.1")
    assert target == f"http://127.0.0.1:{hook}/done?x=1" and extensions == {}
    async with httpx.AsyncClient() as client:
        response = await client.post(target, json={"a": 1}, headers=headers)
    assert response.status_code == 204
    assert _Hook.seen[-1] == f"hooks.example.invalid:{hook}"


def test_https_keeps_its_server_name_and_ipv6_is_bracketed() -> None:
    target, headers, extensions = pinned_request("https://hooks.example.com/x", "2606:2800::1")
    assert target == "https://[2606:2800::1]/x"
    assert headers == {"Host": "hooks.example.com"}
    assert extensions == {"sni_hostname": "hooks.example.com"}
    assert pinned_request("https://hooks.example.com/x", None) == (
        "https://hooks.example.com/x",
        {},
        {},
    )
