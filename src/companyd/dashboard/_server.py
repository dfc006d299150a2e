"""The dashboard's web server as a supervised child: :class:`DashboardServer`.

uvicorn serves the Starlette application inside the daemon's event loop (no thread, no
second process). Embedded, uvicorn would take the process's signals: ``Server.serve`` runs
``capture_signals``, which replaces the SIGINT and SIGTERM handlers and re-raises the
captured signals after its shutdown — the daemon owns its signals (graceful stop, SIGHUP
reload, sd_notify), so :class:`_EmbeddedServer` makes that a no-op. uvicorn's own logging
configuration is not installed (``log_config=None``) and its access log is off.

The child binds the listening socket itself and hands it to uvicorn (so a port in use is
never uvicorn's ``sys.exit(1)`` inside the daemon's loop). An address that cannot be bound
does not stop the daemon: the child reports itself started with the problem (``problem``,
shown by ``companyd dashboard``), logs one warning and tries again every
:data:`RETRY_BIND_S` seconds until it can serve. It stops by setting ``should_exit``
(and ``app.state.stopping``, which ends the open event streams). A crash of the web layer
— the server's task ending with an error or on its own — is an error exit of this child:
its supervisor restarts it like any child, and the agents are not touched (they are not
under it, and the web layer holds none of their state).

Connections are admitted by a :class:`~companyd.dashboard._connections.ConnectionGate`
(caps in total and per client address, a request-head timeout, a small backlog), so a
flood of idle connections cannot take the descriptors the rest of the daemon needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

from companyd._aio import race
from companyd.clock import Clock, SystemClock
from companyd.dashboard._connections import BACKLOG, ConnectionGate
from companyd.errors import CompanydError
from companyd.supervision import ChildContext

__all__ = ["DashboardServer"]

log = logging.getLogger("companyd.dashboard.server")

#: How long open connections (event streams) may take to close on stop.
GRACEFUL_S = 2
#: How often an address that could not be bound is tried again.
RETRY_BIND_S = 10.0


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Capture nothing: the daemon owns SIGINT, SIGTERM and SIGHUP."""
        yield


class DashboardServer:
    """Serves the dashboard on ``host:port`` until asked to stop.

    Args:
        app: builds a fresh application for each start (a restart begins clean).
        host: the address to bind (an IP address).
        port: the port (0: any free one; :attr:`url` says which).
        tls: ``(certificate chain, private key)`` PEM files to serve HTTPS, or None.
        behind_proxy: trust ``X-Forwarded-*`` from the proxy (loopback) in front.
        clock: the daemon's clock (the connection gate rate-limits its log on it).

    Attributes:
        url: where the dashboard is served (``http://127.0.0.1:8470``) once started; None
            before and while stopped.
        problem: why it is not serving (the address cannot be bound), or None.
        gate: admits the connections (its counters say what the caps refused).
    """

    def __init__(
        self,
        app: Callable[[], Starlette],
        host: str,
        port: int,
        *,
        tls: tuple[Path, Path] | None = None,
        behind_proxy: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self._app = app
        self.host = host
        self.port = port
        self.tls = tls
        self.behind_proxy = behind_proxy
        self.url: str | None = None
        self.problem: str | None = None
        self.gate = ConnectionGate(clock or SystemClock())
        #: the running uvicorn server (tests make it fail to check the restart)
        self.server: uvicorn.Server | None = None

    async def run(self, ctx: ChildContext) -> None:
        """Bind, serve, report the URL as started info; stop on ``ctx.stopping``.

        Raises:
            CompanydError: the server stopped by itself (a crash of the web layer).
        """
        sock = await self._bind_or_wait(ctx)
        if sock is None:
            return  # asked to stop before the address could be bound
        app = self._app()
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="off",
            ssl_certfile=str(self.tls[0]) if self.tls else None,
            ssl_keyfile=str(self.tls[1]) if self.tls else None,
            proxy_headers=self.behind_proxy,
            server_header=False,
            timeout_graceful_shutdown=GRACEFUL_S,
            http=self.gate.protocol(),
            backlog=BACKLOG,
        )
        server = _EmbeddedServer(config)
        self.server = server
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        try:
            while not server.started and not serving.done():
                await race(serving, asyncio.sleep(0.02))
            if serving.done():
                serving.result()
                raise CompanydError("the dashboard's web server stopped while starting")
            self.url = self._url(sock)
            log.info("dashboard on %s", self.url)
            if self.problem is None:
                ctx.started({"url": self.url})
            self.problem = None
            await race(serving, ctx.stopping.wait())
            if serving.done():
                serving.result()  # the web layer's own error, if it raised one
                raise CompanydError("the dashboard's web server stopped by itself")
        finally:
            self.url = None
            app.state.stopping.set()
            server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(serving), GRACEFUL_S + 3)
            if not serving.done():
                serving.cancel()
                with contextlib.suppress(BaseException):
                    await serving
            sock.close()
            self.server = None

    async def _bind_or_wait(self, ctx: ChildContext) -> socket.socket | None:
        """The bound socket; until it can be bound, report the problem and retry."""
        while True:
            try:
                return self._bind()
            except CompanydError as exc:
                if self.problem is None:
                    log.warning("%s; trying again every %g s", exc, RETRY_BIND_S)
                    ctx.started({"problem": str(exc)})
                self.problem = str(exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.stopping.wait(), RETRY_BIND_S)
            if ctx.stopping.is_set():
                return None

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on connections of such a socket;
        # with the default 0, each keep-alive response waited ~40 ms for a delayed ACK
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise CompanydError(
                f"cannot serve the dashboard on {self.host}:{self.port}: "
                f"{exc.strerror or exc}; choose a free port in dashboard.listen (or set "
                "dashboard.enabled: false)"
            ) from exc
        return sock

    def _url(self, sock: socket.socket) -> str:
        port = sock.getsockname()[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host}:{port}"
