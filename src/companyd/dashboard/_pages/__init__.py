"""The dashboard's pages: one module per page, listed in :data:`PAGES`.

The contract of a page module (docs/dashboard.md, "Adding a page"):

* ``routes: list[starlette.routing.BaseRoute]`` — its URLs (``/runs``, ``/runs/{run_id}``,
  …); handlers read the services as ``ctx_of(request)`` (``request.app.state.ctx``) and
  answer with :func:`companyd.dashboard._render.render`;
* optionally ``live: list[companyd.dashboard._live.Live]`` — fragments re-rendered on bus
  events and pushed over ``/live`` (server-sent events);
* every action is :func:`companyd.dashboard._actions.perform` (an Admin operation, recorded
  "via dashboard"), behind a POST route (the CSRF guard checks it).

Adding a page is adding its module to the import and to :data:`PAGES`; its link in the
navigation bar is already in :data:`companyd.dashboard._render.NAV`.
"""

from __future__ import annotations

from types import ModuleType

from companyd.dashboard._pages import (
    agent,
    config,
    inbox,
    memory,
    overview,
    routines,
    runs,
    spend,
    today,
)

__all__ = ["PAGES"]

#: Every page module, in navigation order.
PAGES: tuple[ModuleType, ...] = (
    overview,
    today,
    agent,
    runs,
    routines,
    spend,
    memory,
    inbox,
    config,
)
