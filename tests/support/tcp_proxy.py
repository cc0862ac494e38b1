"""A real TCP proxy in front of PostgreSQL, for database-outage tests.

Why: "the database is unreachable" must be produced for real (a closed port, connections reset
mid-conversation), not by patching a driver. The app connects to the proxy; the test cuts it
(every open connection aborted; then either the port is closed, or each new connection is
accepted and dropped at once, counted so a test can wait for the app to have tried), and opens it
again on the same port. Runs on the caller's event loop (the app under test shares it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sqlalchemy.engine import make_url

__all__ = ["PostgresProxy", "postgres_proxy"]


class PostgresProxy:
    def __init__(self, database_url: str) -> None:
        parsed = make_url(database_url)
        socket_dir = parsed.query.get("host")
        self._unix_path: str | None = None
        if isinstance(socket_dir, str) and socket_dir.startswith("/"):
            self._unix_path = f"{socket_dir}/.s.PGSQL.{parsed.port or 5432}"
        self._target = (parsed.host or "127.0.0.1", parsed.port or 5432)
        self._database_url = database_url
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._dropping = False
        self.port = 0
        #: Connections accepted and dropped while cut with ``drop_new=True``.
        self.dropped = 0
        self._dropped_changed = asyncio.Condition()

    @property
    def url(self) -> str:
        """The database URL, pointed at the proxy."""
        parsed = make_url(self._database_url)
        query = {k: v for k, v in parsed.query.items() if k != "host"}
        return parsed.set(host="127.0.0.1", port=self.port, query=query).render_as_string(
            hide_password=False
        )

    async def start(self) -> None:
        self._dropping = False
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self, *, drop_new: bool = False) -> None:
        """Abort every open connection; then refuse new ones (closed port), or with
        ``drop_new`` accept and immediately close them (a server that hangs up)."""
        if drop_new:
            self._dropping = True
        elif self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def restore(self) -> None:
        """Forward again, on the same port."""
        if self._server is None:
            await self.start()
        self._dropping = False

    async def wait_dropped(self, count: int) -> None:
        async with self._dropped_changed:
            await self._dropped_changed.wait_for(lambda: self.dropped >= count)

    async def close(self) -> None:
        await self.cut()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._dropping:
            writer.transport.abort()
            async with self._dropped_changed:
                self.dropped += 1
                self._dropped_changed.notify_all()
            return
        try:
            if self._unix_path is not None:
                up_reader, up_writer = await asyncio.open_unix_connection(self._unix_path)
            else:
                up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


@contextlib.asynccontextmanager
async def postgres_proxy(database_url: str) -> AsyncIterator[PostgresProxy]:
    proxy = PostgresProxy(database_url)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
