"""What a dashboard handler may use: the frozen :class:`DashboardContext`.

One context is built by the daemon (the composition root) and handed to
:func:`~companyd.dashboard._app.build_app`; handlers reach it as ``request.app.state.ctx``
(or :func:`ctx_of`). Everything in it is either read-only for the dashboard or an
operation that the daemon's :class:`~companyd.admin.Admin` performs: pages never change the
company's state except through ``admin`` (via :func:`companyd.dashboard._actions.perform`,
which records the action in the event stream "via dashboard").

A page that needs another read-only service adds a field *with a default* at the end of
the dataclass and the daemon fills it in; nothing else here changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from companyd.admin import Admin
from companyd.clock import Clock
from companyd.config import CompanyConfig
from companyd.dashboard._auth import Sessions
from companyd.events import EventBus

__all__ = ["DashboardContext", "ctx_of"]


@dataclass(frozen=True, kw_only=True)
class DashboardContext:
    """The daemon's services as the dashboard sees them.

    Attributes:
        admin: the operator contract, implemented by the daemon; every action goes through it.
        bus: the daemon's event bus (live updates subscribe to it; actions publish
            ``operator_action`` on it).
        clock: the injectable clock (login tokens' and sessions' lifetimes, "ago" texts).
        sessions: the one-time login tokens and the sessions they opened (owned by the
            daemon, so a restart of the web layer keeps everyone logged in).
        config: the running configuration, read at each call (a reload replaces it).
        secure_cookies: set the session cookie's ``Secure`` flag (TLS or behind a proxy).
    """

    admin: Admin
    bus: EventBus
    clock: Clock
    sessions: Sessions
    config: Callable[[], CompanyConfig]
    secure_cookies: bool = False


def ctx_of(conn: HTTPConnection) -> DashboardContext:
    """The context of the application serving ``conn`` (a request or a websocket)."""
    ctx: DashboardContext = conn.app.state.ctx
    return ctx
