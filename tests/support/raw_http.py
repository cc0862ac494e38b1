"""HTTP spoken by hand over a socket, for what a client library would refuse to send or hide."""

from __future__ import annotations

import asyncio

#: Guard so a connection the server never closes fails the test instead of hanging the suite.
HANG_GUARD = 60.0


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (bounded by HANG_GUARD)."""
    return await asyncio.wait_for(reader.read(), HANG_GUARD)


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers with lower-case names, body)`` of one raw HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body
