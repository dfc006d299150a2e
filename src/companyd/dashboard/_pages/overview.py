"""The Overview page (``/``): the company at a glance, kept live.

* the supervision tree as the org chart (state, restarts, uptime; a crash flashes and the
  restart count moves without a reload) — live fragment ``tree``;
* runs in flight with their current step — ``inflight``;
* today's and this month's spend against the budgets — ``spend``;
* the next routines — ``routines``;
* the last alerts (events of warning or critical severity) — ``alerts``.

Everything comes from one :meth:`~companyd.admin.Admin.status` call per render (and the
bus's recent events for the alerts).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from companyd.dashboard._attention import last_alerts as alert_list
from companyd.dashboard._context import ctx_of
from companyd.dashboard._live import Live
from companyd.dashboard._render import fragment, render
from companyd.events import EVENT_TYPES, Event, Severity

__all__ = ["ALERT_KINDS", "TREE_KINDS", "live", "routes"]

#: The events that change the org chart.
TREE_KINDS = frozenset(
    {
        "sup_started", "sup_stopped", "child_started", "child_ignored", "child_start_failed",
        "child_exited", "child_terminated", "restart", "backoff", "max_intensity",
        "auto_shutdown", "agent_paused", "agent_resumed", "daemon_reloaded",
    }
)  # fmt: skip
_RUN_KINDS = frozenset({"run_started", "run_finished", "run_failed", "model_fallback"})
_SPEND_KINDS = frozenset(
    {"run_finished", "run_failed", "budget_threshold", "budget_exhausted", "budget_reset",
     "budget_raised"}
)  # fmt: skip
_ROUTINE_KINDS = frozenset(
    {
        "routine_failed",
        "routine_missed",
        "routine_skipped",
        "routine_result",
        "routine_unverified",
        "daemon_reloaded",
    }
)


def _default_severity(cls: type[Event]) -> Severity:
    default = cls.__dataclass_fields__["severity"].default
    return default if isinstance(default, Severity) else Severity.INFO


#: The kinds shown as "last alerts": those warning or critical by default.
ALERT_KINDS = frozenset(
    kind
    for kind, cls in EVENT_TYPES.items()
    if _default_severity(cls).rank >= Severity.WARNING.rank
)


def last_alerts(request: Request, limit: int = 10) -> list[dict[str, Any]]:
    """The latest warning and critical events, newest first, as
    :func:`~companyd.dashboard._attention.alert_view` (the routine or agent, the reason, a
    link).
    """
    return alert_list(ctx_of(request).bus.recent(limit=1000), since=0.0, limit=limit)


async def overview(request: Request) -> Response:
    """The whole page."""
    status = await ctx_of(request).admin.status()
    return render(
        request,
        "overview.html",
        status=status,
        agents=set(ctx_of(request).config().agents),
        alerts=last_alerts(request),
    )


async def _fragment(request: Request, template: str) -> str:
    status = await ctx_of(request).admin.status()
    return fragment(
        request,
        template,
        status=status,
        agents=set(ctx_of(request).config().agents),
        alerts=last_alerts(request),
    )


async def _tree(request: Request) -> str:
    return await _fragment(request, "fragments/tree.html")


async def _inflight(request: Request) -> str:
    return await _fragment(request, "fragments/inflight.html")


async def _spend(request: Request) -> str:
    return await _fragment(request, "fragments/spend.html")


async def _routines(request: Request) -> str:
    return await _fragment(request, "fragments/routines.html")


async def _alerts(request: Request) -> str:
    return await _fragment(request, "fragments/alerts.html")


routes: list[BaseRoute] = [Route("/", overview, methods=["GET"], name="overview")]

live: list[Live] = [
    Live("tree", TREE_KINDS, _tree, every=30.0),
    Live("inflight", _RUN_KINDS, _inflight, every=5.0),
    Live("spend", _SPEND_KINDS, _spend, every=60.0),
    Live("routines", _ROUTINE_KINDS, _routines, every=60.0),
    Live("alerts", ALERT_KINDS, _alerts),
]
