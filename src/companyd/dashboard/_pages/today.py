"""The Today page (``/today``): what the company produced today and yesterday.

Every run that ended since the start of yesterday (in the company's time zone), newest
first, grouped by day: its routine (or who asked), agent, status — whatever status string
the journal holds, shown as it is —, when it ended, its cost, where its result went, and
its text (the answer, cut at :data:`TEXT_LIMIT` characters saying the full size; the whole
of it is on the run's page). Everything comes from :meth:`~companyd.admin.Admin.runs`
(finished runs started since yesterday, at most :data:`LIMIT`, each with its result's
delivery records from the run journal — the durable record, so a result delivered before a
restart still says "delivered to telegram at 14:02 (message 812)" after it; the latest
record of each channel is shown). A run without records falls back to the bus's recent
``result_delivered`` / ``result_undelivered`` events, then to the running configuration
(each routine's resolved ``deliver``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from companyd.admin import AdminError
from companyd.clock import utc_from_ts
from companyd.dashboard._context import ctx_of
from companyd.dashboard._render import render

__all__ = ["LIMIT", "TEXT_LIMIT", "bounded", "day_starts", "deliveries_of", "routes"]

#: At most this many runs are listed.
LIMIT = 500
#: A result's text is cut at this many characters.
TEXT_LIMIT = 1500


def bounded(text: str | None, limit: int = TEXT_LIMIT) -> tuple[str, int]:
    """``text`` cut at ``limit`` characters, and its full length (0 for None)."""
    if not text:
        return "", 0
    return (text if len(text) <= limit else text[:limit] + "…"), len(text)


def day_starts(now: float, timezone: str) -> tuple[float, float]:
    """Epoch seconds of the start of today and of yesterday in ``timezone``."""
    tz = ZoneInfo(timezone)
    local = utc_from_ts(now).astimezone(tz)
    today = local.replace(hour=0, minute=0, second=0, microsecond=0)
    yesterday = (today - timedelta(days=1)).replace(tzinfo=None)
    return today.timestamp(), datetime(
        yesterday.year, yesterday.month, yesterday.day, tzinfo=tz
    ).timestamp()


def deliveries_of(
    row: Mapping[str, Any], configured: Mapping[str, tuple[str, ...]], events: list[Any]
) -> list[dict[str, str]]:
    """Where ``row``'s result went, as ``{"state", "text"}``: the row's own ``deliveries``
    when it has them; else the deliveries the bus saw for its run (done or not, and why);
    else what its routine is configured to deliver to; else to whom the answer went.
    """
    own = row.get("deliveries")
    if isinstance(own, list) and own:
        return _recorded(own)
    run_id = row.get("run_id")
    seen = []
    for e in events:
        if e.data.get("run_id") != run_id:
            continue
        if e.kind == "result_delivered":
            seen.append({"state": "delivered", "text": f"delivered to {e.data['to']}: "
                         f"{e.data.get('where', '')}".rstrip(": ")})  # fmt: skip
        elif e.kind == "result_undelivered":
            seen.append({"state": "undelivered", "text": f"not delivered to {e.data['to']}: "
                         f"{e.data.get('reason', '')}".rstrip(": ")})  # fmt: skip
    if seen:
        return seen
    routine = row.get("routine")
    if routine:
        targets = configured.get(routine)
        if targets is None:
            return [{"state": "", "text": "its routine is no longer in company.yaml"}]
        if not targets:
            return [{"state": "", "text": "delivers nowhere (no deliver, no expected_output)"}]
        return [{"state": "configured", "text": f"delivers to {', '.join(targets)}"}]
    asked = row.get("asked_by")
    return [{"state": "", "text": f"answered to {asked}" if asked else "answered to the asker"}]


#: A delivery record's ``outcome`` as the page's ``state`` (its CSS class).
_STATES = {"delivered": "delivered", "queued": "queued", "not_delivered": "undelivered"}


def _recorded(records: list[Any]) -> list[dict[str, str]]:
    """The run's own delivery records (the run journal's
    :class:`~companyd.admin._blocks.ResultDelivery`, or texts): the latest of each channel
    — "delivered to telegram at 14:02 (message 812)" replaces its "queued for telegram".
    """
    latest: dict[object, dict[str, str]] = {}
    for i, d in enumerate(records):
        if not isinstance(d, Mapping):
            latest[i] = {"state": "", "text": str(d)}
            continue
        state = str(d.get("state") or _STATES.get(str(d.get("outcome")), ""))
        key = d.get("to") or i
        latest.pop(key, None)
        latest[key] = {"state": state, "text": str(d.get("text", d))}
    return list(latest.values())


async def today_page(request: Request) -> Response:
    """The results of today and yesterday, newest first."""
    ctx = ctx_of(request)
    config = ctx.config()
    now = ctx.clock.time()
    today, yesterday = day_starts(now, config.timezone)
    try:
        runs = (
            await ctx.admin.runs(since=yesterday, finished=True, limit=LIMIT, deliveries=True)
        ).runs
    except AdminError as exc:
        return render(request, "today.html", status_code=503, days=[], error=str(exc), limit=LIMIT)
    configured = {slug: r.deliver for slug, r in config.routines.items()}
    events = [e for e in ctx.bus.recent(limit=1000)
              if e.kind in ("result_delivered", "result_undelivered")]  # fmt: skip
    days: list[dict[str, Any]] = [
        {"label": "Today", "start": today, "results": []},
        {"label": "Yesterday", "start": yesterday, "results": []},
    ]
    for row in runs:
        text, size = bounded(row.get("answer"))
        entry = {
            **row,
            "text": text,
            "size": size,
            "cut": size > TEXT_LIMIT,
            "deliveries": deliveries_of(row, configured, events),
        }
        at = row.get("ended") or row.get("started") or now
        (days[0] if at >= today else days[1])["results"].append(entry)
    return render(request, "today.html", days=days, error="", limit=LIMIT, full=len(runs) >= LIMIT)


routes: list[BaseRoute] = [Route("/today", today_page, methods=["GET"], name="today")]
