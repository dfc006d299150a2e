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

**The web stack is loaded by the first visit** (issue 31). Before ``READY=1`` the child
binds the address and listens, and reports itself started with its URL: from then on the
kernel takes connections into the backlog, so the dashboard answers every visit — but
uvicorn (with click and h11), Starlette's routing and middlewares, Jinja2, the templates
and the pages (~7 MB and ~0.1 s of CPU of imports here) are not loaded until someone
connects. The first pending connection (the listening socket turns readable; it is not
accepted until uvicorn accepts it) makes the child import uvicorn in a worker thread and
start it on the socket; the first request then imports the application in a worker thread
too (:class:`_FirstRequestApp`) and builds it. Neither import runs on the event loop, and
that first visit waits ~0.1–0.5 s for them, once per start of the child. They are not
warmed in the background after READY: most companies open their dashboard now and then,
and a daemon whose dashboard is not being looked at then keeps ~7 MB less for weeks.
With TLS uvicorn starts at once, so a certificate that cannot be loaded shows at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd._aio import race
from companyd.clock import Clock, SystemClock
from companyd.dashboard._connections import BACKLOG, ConnectionGate
from companyd.errors import CompanydError
from companyd.supervision import ChildContext

if TYPE_CHECKING:  # types only: uvicorn and the application load at the first connection
    import uvicorn
    from starlette.applications import Starlette

__all__ = ["DashboardServer"]

log = logging.getLogger("companyd.dashboard.server")

#: How long open connections (event streams) may take to close on stop.
GRACEFUL_S = 2
#: How often an address that could not be bound is tried again.
RETRY_BIND_S = 10.0


@functools.cache
def _embedded_server() -> type[uvicorn.Server]:
    """The class of :class:`uvicorn.Server` that leaves the process's signals alone
    (uvicorn is imported here, at the dashboard's first connection).
    """
    import uvicorn

    class _EmbeddedServer(uvicorn.Server):
        """A uvicorn server that leaves the process's signal handlers alone."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            """Capture nothing: the daemon owns SIGINT, SIGTERM and SIGHUP."""
            yield

    return _EmbeddedServer


def _import_app() -> None:
    """Import the application's modules (the face's ``build_app`` names its module, so this
    follows a rename of it): the first request calls it in a worker thread.
    """
    from companyd.dashboard import build_app

    del build_app  # imported for the import's sake: the build runs on the event loop


_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _FirstRequestApp:
    """An ASGI application that builds the real one (``build()``) at its first request.

    :func:`_import_app` (the pages, Starlette, Jinja2) runs in a worker thread, so
    the event loop keeps serving the agents meanwhile; ``build()`` then runs on the loop
    (cheap once imported). Concurrent first requests wait for the same load. A failed load
    fails the requests that waited for it (uvicorn answers 500 and logs it) and the next
    request tries again.
    """

    def __init__(self, build: Callable[[], Starlette]) -> None:
        self._build = build
        self.app: Starlette | None = None
        self._loading: asyncio.Future[Starlette] | None = None

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        """Serve one ASGI connection (HTTP only: uvicorn runs with ``lifespan="off"``)."""
        app = self.app if self.app is not None else await self._load()
        await app(scope, receive, send)

    async def _load(self) -> Starlette:
        done = self._loading is not None and self._loading.done()
        if self._loading is None or (
            done and (self._loading.cancelled() or self._loading.exception() is not None)
        ):
            self._loading = asyncio.ensure_future(self._import_and_build())
        return await asyncio.shield(self._loading)

    async def _import_and_build(self) -> Starlette:
        await asyncio.to_thread(_import_app)
        self.app = self._build()
        return self.app

    def stop(self) -> None:
        """End the open event streams (``app.state.stopping``), if the app was built."""
        if self.app is not None:
            self.app.state.stopping.set()


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
        """Bind, report the URL as started info, serve; stop on ``ctx.stopping``.

        Without TLS, uvicorn is loaded (in a worker thread) and started on the listening
        socket when the first connection is pending on it (module docstring); with TLS, at
        once, so a certificate that cannot be loaded shows at start, not at a first visit.

        Raises:
            CompanydError: the server stopped by itself (a crash of the web layer).
        """
        sock = await self._bind_or_wait(ctx)
        if sock is None:
            return  # asked to stop before the address could be bound
        app = _FirstRequestApp(self._app)
        server: uvicorn.Server | None = None
        serving: asyncio.Future[None] | None = None
        try:
            if self.tls is None:
                # listening: the kernel takes connections into the backlog from here on
                self._serving(ctx, sock)
                if not await self._first_connection(sock, ctx):
                    return  # asked to stop before anyone connected
                await asyncio.to_thread(importlib.import_module, "uvicorn")
            server = self.server = _embedded_server()(self._config(app))
            serving = asyncio.ensure_future(server.serve(sockets=[sock]))
            while not server.started and not serving.done():
                await race(serving, asyncio.sleep(0.02))
            if serving.done():
                serving.result()
                raise CompanydError("the dashboard's web server stopped while starting")
            if self.url is None:
                self._serving(ctx, sock)
            await race(serving, ctx.stopping.wait())
            if serving.done():
                serving.result()  # the web layer's own error, if it raised one
                raise CompanydError("the dashboard's web server stopped by itself")
        finally:
            self.url = None
            app.stop()
            if server is not None and serving is not None:
                server.should_exit = True
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(serving), GRACEFUL_S + 3)
                if not serving.done():
                    serving.cancel()
                    with contextlib.suppress(BaseException):
                        await serving
            sock.close()
            self.server = None

    def _serving(self, ctx: ChildContext, sock: socket.socket) -> None:
        """Record and report that the dashboard answers on ``sock``'s address."""
        self.url = self._url(sock)
        log.info("dashboard on %s", self.url)
        if self.problem is None:
            ctx.started({"url": self.url})
        self.problem = None

    @staticmethod
    async def _first_connection(sock: socket.socket, ctx: ChildContext) -> bool:
        """Wait until a connection is pending on the listening ``sock`` (it is not accepted
        here: uvicorn accepts it); False when ``ctx.stopping`` came first.
        """
        loop = asyncio.get_running_loop()
        pending: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not pending.done():
                pending.set_result(None)

        loop.add_reader(sock.fileno(), readable)
        try:
            await race(pending, ctx.stopping.wait())
        finally:
            loop.remove_reader(sock.fileno())
        return pending.done() and not ctx.stopping.is_set()

    def _config(self, app: _FirstRequestApp) -> uvicorn.Config:
        import uvicorn

        return uvicorn.Config(
            app,
            interface="asgi3",
            ws="none",  # the dashboard streams with server-sent events: no WebSocket stack
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
