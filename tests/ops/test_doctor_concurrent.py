"""``companyd doctor``'s network checks run at the same time (issue 31), shown without a
clock: a PostgreSQL stand-in and the Messages API stand-in each hold their answer until the
other has been asked. Run one after the other, the first would answer only when its
hang guard gave up, without the second having been asked; run together, each is asked
while the other waits. The report keeps its order.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from companyd.ops._doctor import run_doctor
from companyd.testing.messages_api import MessagesAPIServer

from .opskit import API_KEY, env, write_company

pytestmark = pytest.mark.anyio

NO_SYSTEMD = Path("/nonexistent/run/systemd/system")
#: Only against a hang: how long a stand-in holds its answer for the other to be asked.
HANG_GUARD = 10.0


class HeldModels(MessagesAPIServer):
    """The Messages API stand-in whose ``GET /v1/models`` (the key check) is answered only
    once ``other`` is set (or the hang guard gives up); ``asked`` is set on arrival.
    """

    def __init__(self, asked: threading.Event, other: threading.Event, **kw: Any) -> None:
        super().__init__(**kw)
        self.asked, self.other = asked, other
        self.saw_other = False

    def _models(self, h: Any, path: str, headers: dict[str, str]) -> None:
        self.asked.set()
        self.saw_other = self.other.wait(HANG_GUARD)
        super()._models(h, path, headers)


class HeldPostgres:
    """A loopback listener that speaks just enough of the PostgreSQL protocol to refuse a
    connection (an ``ErrorResponse``), once ``other`` is set (or the hang guard gives up);
    ``asked`` is set when a client's startup message arrives.
    """

    def __init__(self, asked: threading.Event, other: threading.Event) -> None:
        self.asked, self.other = asked, other
        self.saw_other = False
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> HeldPostgres:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (length,) = struct.unpack("!I", await reader.readexactly(4))
            await reader.readexactly(length - 4)  # the startup message (sslmode=disable)
            self.asked.set()
            self.saw_other = await asyncio.to_thread(self.other.wait, HANG_GUARD)
            fields = b"SFATAL\x00C28000\x00Mthe stand-in refuses every connection\x00\x00"
            writer.write(b"E" + struct.pack("!I", len(fields) + 4) + fields)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_the_network_checks_are_asked_together_and_listed_in_order(
    tmp_path: Path,
) -> None:
    db_asked, api_asked = threading.Event(), threading.Event()
    api = HeldModels(api_asked, db_asked, api_key=API_KEY)
    with api:
        async with HeldPostgres(db_asked, api_asked) as pg:
            config = write_company(tmp_path, state={"backend": "postgres"})
            environ = {
                **env(api.base_url),
                "COMPANYD_DATABASE_URL": (
                    f"postgresql://acme@127.0.0.1:{pg.port}/acme?sslmode=disable"
                ),
            }
            report = await run_doctor(config, environ=environ, systemd_runtime=NO_SYSTEMD)
    # each stand-in was asked while the other still held its answer
    assert pg.saw_other and api.saw_other
    checks = {c.name: c for c in report.checks}
    assert checks["database"].status == "problem"
    assert "refuses every connection" in checks["database"].summary
    assert checks["anthropic"].status == "ok"
    names = [c.name for c in report.checks]
    assert names[:5] == ["config", "secrets", "database", "anthropic", "telegram"]
