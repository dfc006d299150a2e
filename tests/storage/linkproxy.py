"""A loopback TCP proxy whose link can be frozen: a dead network link, made on demand.

Frozen, it stops forwarding in both directions but keeps every socket open, as a cable
pulled between two hosts does: the client's queries get no answer and the server sees
an idle, healthy session (the proxy's kernel still acknowledges TCP), so only the
application's own deadlines and leases can tell.
"""

from __future__ import annotations

import asyncio
import contextlib

import psycopg


class LinkProxy:
    """``127.0.0.1:<port>`` forwarding to ``upstream_port``; use as an async context."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    def dsn(self, dsn: str) -> str:
        """``dsn`` pointed at the proxy."""
        return psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    def freeze(self) -> None:
        """Stop forwarding (sockets stay open)."""
        self._thawed.clear()

    async def __aenter__(self) -> LinkProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for w in self._writers:
            w.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers += [writer, up_writer]
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                await self._thawed.wait()
                data = await src.read(65536)
                if not data:
                    break
                await self._thawed.wait()  # frozen while reading: hold the bytes
                dst.write(data)
                await dst.drain()
        dst.close()
