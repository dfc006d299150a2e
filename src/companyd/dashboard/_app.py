"""The dashboard's web application: :func:`build_app`.

``build_app(ctx)`` returns a Starlette application serving every page of
:data:`companyd.dashboard._pages.PAGES` (each module's ``routes``; its ``live`` fragments on
``/live``), the login routes, and the static assets under ``/static`` (vendored htmx, its
SSE extension, the chart library, the dashboard's own CSS and JavaScript) and the routines'
webhooks (``POST /hooks/<routine>``, :mod:`companyd.dashboard._hooks`). Middlewares,
outermost first: security headers, then the session and CSRF guard
(:mod:`companyd.dashboard._security`), then the attention strip's
(:mod:`companyd.dashboard._attention`: what needs the founder, computed for every page).

The application's state: ``ctx`` (the :class:`~companyd.dashboard._context.DashboardContext`),
``templates`` (the Jinja2 environment, :mod:`companyd.dashboard._render`) and ``stopping``
(an :class:`asyncio.Event` the server sets when it stops, which ends the event streams).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from companyd.dashboard import _attention as attention
from companyd.dashboard import _hooks as hooks
from companyd.dashboard import _login as login
from companyd.dashboard._attention import AttentionMiddleware
from companyd.dashboard._context import DashboardContext
from companyd.dashboard._live import Live, live_endpoint
from companyd.dashboard._pages import PAGES
from companyd.dashboard._render import make_templates
from companyd.dashboard._security import SecurityHeaders, SessionGuard

__all__ = ["STATIC", "build_app"]

#: The static assets (``/static/…``).
STATIC = Path(__file__).parent / "static"


def build_app(ctx: DashboardContext) -> Starlette:
    """The dashboard for ``ctx``: every page's routes, ``/live``, login and static files.

    Raises:
        ValueError: two pages declare a live fragment of the same name.
    """
    fragments: dict[str, Live] = {}
    routes: list[BaseRoute] = [*login.routes, *hooks.routes]
    for page in (*PAGES, attention):
        routes.extend(getattr(page, "routes", []))
        for fragment in getattr(page, "live", []):
            if fragment.name in fragments:
                raise ValueError(f"two live fragments are named {fragment.name!r}")
            fragments[fragment.name] = fragment
    routes.append(Route("/live", live_endpoint(fragments), name="live"))
    routes.append(Mount("/static", StaticFiles(directory=STATIC), name="static"))
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(SessionGuard, sessions=ctx.sessions),
            Middleware(AttentionMiddleware),
        ],
    )
    app.state.ctx = ctx
    app.state.templates = make_templates()
    app.state.stopping = asyncio.Event()
    app.state.hook_limiter = hooks.HookLimiter()
    return app
