"""What needs the founder, on every page: the attention strip and the Inbox link's badge.

:func:`attention` reads :meth:`~companyd.admin.Admin.status` and
:meth:`~companyd.admin.Admin.inbox` (and the bus's recent events) and answers an
:class:`Attention`: the number of inbox items waiting, and the items of the strip, most
urgent first —

* ``inbox``: items wait in the inbox (with a link to it);
* ``offline``: the model is the offline stand-in (nothing real is answered or spent);
* ``telegram``: Telegram is off (results, approvals and alerts reach no phone) or failing
  (sends or commands), with the pager's reason;
* ``reload``: the last reload of company.yaml was rejected (the first error; the old
  version keeps running), with a link to the Config page;
* ``store``: a store is degraded — the state disk refuses writes (a ``state_disk_full``
  not followed by ``state_disk_recovered``) or the spend ledger cannot be read;
* ``paused``: agents are paused (each a link to its page, with why when known).

and the last alerts (warning and critical events of the last 24 hours, newest first), each
as :func:`alert_view`: the routine or agent it concerns, the reason, and a link to the run,
routine or agent.

A strip that cannot be read (the daemon is stopping, a store raises) shows one item saying
so: the page itself still renders. :class:`AttentionMiddleware` computes it once per page
request (an HTML ``GET`` with a session), before the handler, into ``request.state``, where
:func:`companyd.dashboard._render.render` finds it for ``base.html``; the live fragments
``attention`` and ``inbox_badge`` re-render it after the events that change it, so the
counts move after an action without a reload.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from companyd.dashboard._context import DashboardContext, ctx_of
from companyd.dashboard._live import Live
from companyd.dashboard._render import fragment
from companyd.events import Event, Severity

__all__ = [
    "ALERT_WINDOW_S",
    "ATTENTION_KINDS",
    "Attention",
    "AttentionMiddleware",
    "alert_view",
    "attention",
    "attention_of",
    "live",
]

log = logging.getLogger("companyd.dashboard")

#: How far back the strip's "last alerts" look (seconds).
ALERT_WINDOW_S = 86_400.0
#: How many alerts the strip lists.
ALERT_LIMIT = 5

#: The events after which the strip (or the badge) may change.
ATTENTION_KINDS = frozenset(
    {
        "founder_approval_requested", "founder_question", "founder_result_for_approval",
        "founder_decided", "operator_action", "proposal_created", "proposal_applied",
        "task_quarantined", "agent_paused", "agent_resumed", "daemon_reloaded",
        "config_rejected", "telegram_commands_failing", "telegram_commands_recovered",
        "state_disk_full", "state_disk_recovered", "budget_exhausted", "budget_raised",
        "run_failed", "routine_failed", "routine_missed", "result_undelivered",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Attention:
    """What the strip shows: ``inbox`` items waiting (-1: unknown), the ``items`` (dicts
    with ``key``, ``level`` — ``warn`` or ``info`` —, ``text``, ``href`` and, for paused
    agents, ``links``) and the last ``alerts`` (:func:`alert_view`).
    """

    inbox: int
    items: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)


def _first(data: Mapping[str, Any], *names: str) -> str:
    for name in names:
        value = data.get(name)
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, str) and value:
            return value
    return ""


def alert_view(event: Event) -> dict[str, Any]:
    """An alert as the dashboard shows it: ``kind``, ``severity``, ``ts``, ``source``,
    ``routine`` and ``agent`` (when the event names them), ``reason`` (its reason, error,
    message or summary, after the MCP server it names and before where a repair set lines
    aside; empty when it has none) and ``href`` (its run, else its routine, else its
    agent; None when it names none of them).
    """
    data = event.data
    routine = data.get("routine") if isinstance(data.get("routine"), str) else None
    agent = data.get("agent") if isinstance(data.get("agent"), str) else None
    if agent is None and isinstance(data.get("child"), str) and "/agents/" in event.source:
        agent = data["child"]
    run_id = data.get("run_id") if isinstance(data.get("run_id"), str) else None
    reason = _first(data, "reason", "error", "message", "errors", "first_error", "summary")
    if not reason and event.kind == "budget_threshold":
        reason = f"{data.get('scope', 'budget')} at {data.get('level', '?')} of its limit"
    server = data.get("server")
    if isinstance(server, str) and server and reason:
        reason = f"server {server!r}: {reason}"  # an agent's MCP servers look alike otherwise
    corrupt = data.get("corrupt_file")
    if isinstance(corrupt, str) and corrupt:
        reason += f" (set aside in {corrupt})"
    href = (
        f"/runs/{run_id}"
        if run_id
        else f"/routines/{routine}"
        if routine
        else f"/agents/{agent}"
        if agent
        else None
    )
    return {
        "kind": event.kind,
        "severity": str(event.severity),
        "ts": event.ts,
        "source": event.source,
        "routine": routine,
        "agent": agent,
        "reason": reason,
        "href": href,
    }


def last_alerts(events: Iterable[Event], since: float, limit: int) -> list[dict[str, Any]]:
    """The latest ``limit`` warning and critical ``events`` at or after ``since``, newest
    first, as :func:`alert_view`.
    """
    chosen = [e for e in events if e.severity.rank >= Severity.WARNING.rank and e.ts >= since]
    return [alert_view(e) for e in reversed(chosen[-limit:])] if limit else []


def _store_problem(events: list[Event], spend_unavailable: str | None) -> str:
    full: dict[str, str] = {}
    for e in events:  # oldest first: a recovery clears the outage before it
        what = str(e.data.get("what", ""))
        if e.kind == "state_disk_full":
            full[what] = str(e.data.get("message") or e.data.get("error") or "")
        elif e.kind == "state_disk_recovered":
            full.pop(what, None)
    if full:
        what, message = next(iter(full.items()))
        return f"the state disk refuses writes of {what}: {message}".rstrip(": ")
    if spend_unavailable:
        return f"the spend ledger cannot be read: {spend_unavailable}"
    return ""


def _paused(tree: Mapping[str, Any], agents: set[str]) -> list[str]:
    out: list[str] = []
    if tree.get("id") in agents and tree.get("state") == "paused":
        out.append(str(tree["id"]))
    for child in tree.get("children", ()) or ():
        if isinstance(child, Mapping):
            out += _paused(child, agents)
    return out


async def attention(ctx: DashboardContext) -> Attention:
    """What needs the founder now (see the module docstring); never raises."""
    try:
        status = await ctx.admin.status()
        inbox = await ctx.admin.inbox()
    except Exception as exc:  # a page must render even when the daemon cannot answer
        log.debug("the attention strip could not be read: %s", exc)
        return Attention(
            inbox=-1,
            items=[{"key": "unknown", "level": "warn", "href": None,
                    "text": f"the daemon's state cannot be read now: {exc}"}],
        )  # fmt: skip
    events = ctx.bus.recent(limit=1000)
    items: list[dict[str, Any]] = []
    waiting = len(inbox.items)
    if waiting:
        items.append({
            "key": "inbox", "level": "warn", "href": "/inbox",
            "text": "1 item waits for you in the inbox" if waiting == 1
            else f"{waiting} items wait for you in the inbox",
        })  # fmt: skip
    if status.daemon.offline:
        items.append({
            "key": "offline", "level": "info", "href": None,
            "text": "offline model: answers are simulated and nothing is spent",
        })  # fmt: skip
    pager = status.alerts
    if pager["telegram"] == "off":
        items.append({
            "key": "telegram", "level": "warn", "href": "/config",
            "text": "Telegram is off: results, approvals and alerts reach no phone",
        })  # fmt: skip
    elif pager["telegram"] == "degraded" or pager["commands"] == "failing":
        why = pager["reason"] or pager["commands_error"] or "sends are failing"
        items.append({
            "key": "telegram", "level": "warn", "href": "/config",
            "text": f"Telegram is failing: {why}",
        })  # fmt: skip
    reload = status.daemon.reload
    rejected = reload.get("rejected")
    if reload.get("last_result") == "rejected" and rejected:
        items.append({
            "key": "reload", "level": "warn", "href": "/config",
            "text": "the last reload of company.yaml was rejected "
            f"({rejected['errors']} error{'s' if rejected['errors'] != 1 else ''}: "
            f"{rejected['first_error']}); the previous version keeps running",
        })  # fmt: skip
    store = _store_problem(events, status.spend.unavailable)
    if store:
        items.append({"key": "store", "level": "warn", "href": None, "text": f"degraded: {store}"})
    paused = _paused(status.tree, set(ctx.config().agents))
    if paused:
        items.append({
            "key": "paused", "level": "warn", "href": None,
            "text": f"paused: {len(paused)} agent{'s' if len(paused) != 1 else ''}",
            "links": [(a, f"/agents/{a}") for a in paused],
        })  # fmt: skip
    alerts = last_alerts(events, ctx.clock.time() - ALERT_WINDOW_S, ALERT_LIMIT)
    return Attention(inbox=waiting, items=items, alerts=alerts)


def attention_of(request: Request) -> Attention | None:
    """The strip computed for this page request (None: not a page, or no session)."""
    found = getattr(request.state, "attention", None)
    return found if isinstance(found, Attention) else None


#: Paths that are not pages (no strip is computed for them).
_NOT_PAGES = ("/static/", "/live", "/login", "/logout", "/spend.csv")


class AttentionMiddleware:
    """Computes :func:`attention` into ``request.state.attention`` for a page request (a
    ``GET`` with a live session, not a static file, stream or download), so that every
    page's ``base.html`` shows the strip without each handler asking for it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope``, with the strip in its state when it is a page request."""
        path = str(scope.get("path", ""))
        state = scope.setdefault("state", {}) if scope["type"] == "http" else {}
        if (
            scope["type"] == "http"
            and scope.get("method") == "GET"
            and state.get("session") is not None
            and not path.startswith(_NOT_PAGES)
        ):
            state["attention"] = await attention(scope["app"].state.ctx)
        await self.app(scope, receive, send)


async def render_strip(request: Request) -> Attention:
    """The strip for a live fragment's request."""
    return await attention(ctx_of(request))


async def _strip(request: Request) -> str:
    return fragment(request, "fragments/attention.html", attention=await render_strip(request))


async def _badge(request: Request) -> str:
    return fragment(request, "fragments/inbox_badge.html", attention=await render_strip(request))


#: The strip's live fragments: ``attention`` (the strip) and ``inbox_badge`` (the count on
#: the Inbox link), re-rendered after :data:`ATTENTION_KINDS` and every minute.
live: list[Live] = [
    Live("attention", ATTENTION_KINDS, _strip, every=60.0),
    Live("inbox_badge", ATTENTION_KINDS, _badge, every=60.0),
]
