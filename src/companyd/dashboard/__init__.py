"""The dashboard: the company on one page, in the browser, live (docs/dashboard.md).

A Starlette application with Jinja2 templates and htmx, served by uvicorn inside the
daemon's event loop as a supervised child. It reads and acts only through
:class:`~companyd.admin.Admin` (the same operations as the control socket) and the event
bus, so it sits beside ``scheduler`` and ``alerts`` in the layers: it imports L0–L4 and
``admin``, never ``daemon`` or ``cli``.

* :mod:`~companyd.dashboard._context`: :class:`DashboardContext`, what handlers may use
  (``request.app.state.ctx``);
* :mod:`~companyd.dashboard._auth`: one-time login tokens and sessions (:class:`Sessions`);
* :mod:`~companyd.dashboard._security`: the session, CSRF and security-header middlewares;
* :mod:`~companyd.dashboard._render`: the templates and :func:`render`;
* :mod:`~companyd.dashboard._actions`: :func:`perform`, an Admin operation recorded
  "via dashboard";
* :mod:`~companyd.dashboard._live`: server-sent events (:class:`Live` fragments);
* :mod:`~companyd.dashboard._app`: :func:`build_app`;
* :mod:`~companyd.dashboard._connections`: the connection caps and the request-head
  timeout (:class:`ConnectionGate`);
* :mod:`~companyd.dashboard._server`: :class:`DashboardServer`, uvicorn as a child;
* :mod:`~companyd.dashboard._pages`: one module per page, each exposing ``routes``.

The package's ``__init__`` imports nothing: ``companyd.dashboard._auth`` (the sessions, owned
by the daemon) loads without Starlette, uvicorn and Jinja2, which the daemon imports only
when the dashboard starts (``daemon/_dashboard.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.dashboard._app import build_app
    from companyd.dashboard._auth import Sessions
    from companyd.dashboard._context import DashboardContext
    from companyd.dashboard._server import DashboardServer


__all__ = [
    "DashboardContext",
    "DashboardServer",
    "Sessions",
    "build_app",
]


_HOMES: dict[str, str] = {
    "DashboardContext": "companyd.dashboard._context",
    "DashboardServer": "companyd.dashboard._server",
    "Sessions": "companyd.dashboard._auth",
    "build_app": "companyd.dashboard._app",
}


def __getattr__(name: str) -> Any:
    """Import a face name from its module on first use (keeps start-up imports cheap)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
