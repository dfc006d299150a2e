"""The daemon's side of the dashboard: :class:`WebDashboard` wires it into the tree.

The daemon (the composition root) owns the dashboard's sessions — one
:class:`~companyd.dashboard.Sessions` per daemon, so a restart of the web layer logs no one
out — and builds, at each start of the web child, a fresh application over a
:class:`~companyd.dashboard.DashboardContext` of the daemon's ``Admin``, bus, clock and
running configuration. :meth:`WebDashboard.child` is the supervised child (or None when
``dashboard.enabled`` is false or the daemon is a one-off ``ask``); :meth:`WebDashboard.login`
is the ``dashboard_login`` operation's work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from companyd.admin import Admin, AdminError, DashboardLogin
from companyd.clock import Clock
from companyd.config import CompanyConfig, DashboardSpec, listen_address
from companyd.dashboard import Sessions
from companyd.events import EventBus
from companyd.supervision import Backoff, ChildSpec

if TYPE_CHECKING:  # types only: the modules are imported when the dashboard starts
    from starlette.applications import Starlette

    from companyd.dashboard import DashboardServer

__all__ = ["WebDashboard"]


class WebDashboard:
    """The dashboard of one daemon.

    Args:
        admin: the daemon (its Admin implementation).
        config: the running configuration, read at each call (a reload replaces it).
        bus: the daemon's event bus.
        clock: the daemon's clock (login tokens and sessions expire on it).
    """

    def __init__(
        self, admin: Admin, config: Callable[[], CompanyConfig], bus: EventBus, clock: Clock
    ) -> None:
        self._admin = admin
        self._config = config
        self._bus = bus
        self._clock = clock
        self.sessions = Sessions(clock)
        self.server: DashboardServer | None = None
        #: ``dashboard:`` as the server was made (the daemon's start): what it serves with
        #: until the daemon restarts, whatever a reload put in company.yaml meanwhile
        self._serving: DashboardSpec | None = None

    def child(self, oneoff: bool, backoff: Backoff) -> ChildSpec | None:
        """The web server's child spec (restarted after ``backoff``, as the other services
        are), or None when the dashboard is off.
        """
        spec = self._config().spec.dashboard
        if oneoff or not spec.enabled:
            return None
        self._serving = spec
        # Imported here, not at the top: Starlette, uvicorn and Jinja2 are loaded only when
        # the dashboard is on (tests/daemon/test_startup_imports.py keeps them off the
        # import path of `companyd --help` and of a daemon with the dashboard off).
        from companyd.dashboard import DashboardServer

        host, port = listen_address(spec.listen)
        base = self._config().path.parent
        tls = None
        if spec.tls_cert and spec.tls_key:
            tls = (base / Path(spec.tls_cert), base / Path(spec.tls_key))
        self.server = DashboardServer(
            self._app, host, port, tls=tls, behind_proxy=spec.behind_proxy, clock=self._clock
        )
        return ChildSpec(id="dashboard", start=self.server.run, shutdown=10.0, backoff=backoff)

    def _app(self) -> Starlette:
        # Imported here for the reason given in child(); child() imported them already.
        from companyd.dashboard import DashboardContext, build_app

        # the server's settings, not the reloaded file's: a restart of the web layer alone
        # keeps the address and TLS, so a Secure cookie must follow them (else no login)
        spec = self._serving or self._config().spec.dashboard
        ctx = DashboardContext(
            admin=self._admin,
            bus=self._bus,
            clock=self._clock,
            sessions=self.sessions,
            config=self._config,
            secure_cookies=bool(spec.tls_cert) or spec.behind_proxy,
        )
        return build_app(ctx)

    @property
    def url(self) -> str | None:
        """Where the dashboard serves now (``http://127.0.0.1:8470``), or None."""
        return self.server.url if self.server is not None else None

    def login(self) -> DashboardLogin:
        """A one-time login URL.

        Raises:
            AdminError: the dashboard is off, or not serving yet (restarting).
        """
        if self.server is None:
            raise AdminError(
                "the dashboard is off (dashboard.enabled: false in company.yaml); turn it on "
                "and restart companyd"
            )
        url = self.server.url
        if url is None and self.server.problem is not None:
            raise AdminError(f"the dashboard is not serving: {self.server.problem}")
        if url is None:
            raise AdminError(
                "the dashboard is not serving right now (starting or restarting); see "
                "`companyd status` and try again in a few seconds"
            )
        token, expires = self.sessions.issue_login()
        return DashboardLogin(url=f"{url}/login?token={token}", expires_at=expires)
