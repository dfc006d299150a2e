"""The Runs pages: ``/runs`` (the list, filtered) and ``/runs/{run_id}`` (one transcript).

``/runs`` takes the filters of ``companyd runs`` as query values — ``agent``, ``routine``,
``status`` (``running`` or a run outcome), ``since`` (``24h``, ``7d``, ``90m``, ``2w`` back
from now, or a UTC date ``2026-11-01`` or time ``2026-11-01T14:00``) — and ``limit``
(:data:`PAGE` by default, "show more" doubles it up to :data:`MAX_LIMIT`); all of them
through :meth:`~companyd.admin.Admin.runs`. A filter the daemon refuses (an unknown status)
or that cannot be read (a bad ``since``) is shown above an empty list with status 400.

``/runs/{run_id}`` is :meth:`~companyd.admin.Admin.run_show`: who asked, the task, each step
(model calls with tokens and cost, tool calls with input and result, the founder's
decision on a call that waited for approval), consultations and the reviewer's verdict as
links to those runs, the thread, the answer and the totals. Long values are cut to
:data:`SHOWN_CHARS` with their full size said (the whole value is in
``companyd runs show RUN_ID --json``). An unknown run is a 404 with the daemon's message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from companyd.admin import AdminError
from companyd.dashboard._context import ctx_of
from companyd.dashboard._render import render
from companyd.errors import CompanydError
from companyd.runs import RunStatus, cut

__all__ = ["MAX_LIMIT", "PAGE", "SHOWN_CHARS", "STATUSES", "parse_since", "routes"]

#: Runs per page, and the most one page shows.
PAGE = 50
MAX_LIMIT = 800
#: How much of a tool's input or result, or a model's text, the transcript shows.
SHOWN_CHARS = 2_000
#: The status filter's choices, as ``companyd runs --status`` has them.
STATUSES: tuple[str, ...] = ("running", *(str(s) for s in RunStatus))

_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*([mhdw])")
_UNIT = {"m": 60.0, "h": 3_600.0, "d": 86_400.0, "w": 604_800.0}


def parse_since(text: str, now: float) -> float:
    """``since`` as epoch seconds: a duration back from ``now`` (``24h``), or a UTC date or
    date and time, as ``companyd runs --since`` reads it.

    Raises:
        ValueError: anything else, with the accepted forms in the message.
    """
    m = _AGO.fullmatch(text.strip())
    if m:
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"since: expected a date (2026-11-01), a date and time (2026-11-01T14:00) or a "
            f"duration back from now (90m, 24h, 7d, 2w), got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _limit(text: str | None) -> int:
    try:
        value = int(text or PAGE)
    except ValueError:
        value = PAGE
    return max(1, min(value, MAX_LIMIT))


async def runs_page(request: Request) -> Response:
    """The list of runs, newest first, with the filter form."""
    ctx = ctx_of(request)
    q = request.query_params
    filters = {k: (q.get(k) or "").strip() for k in ("agent", "routine", "status", "since")}
    limit = _limit(q.get("limit"))
    error = ""
    runs: Sequence[Mapping[str, Any]] = []
    try:
        since = parse_since(filters["since"], ctx.clock.time()) if filters["since"] else None
        result = await ctx.admin.runs(
            agent=filters["agent"] or None,
            status=filters["status"] or None,
            routine=filters["routine"] or None,
            since=since,
            limit=limit,
        )
        runs = result.runs
    except (ValueError, CompanydError) as exc:  # a bad filter, or the journal unreadable
        error = str(exc)
    config = ctx.config()
    more = {**{k: v for k, v in filters.items() if v}, "limit": str(min(limit * 2, MAX_LIMIT))}
    return render(
        request,
        "runs.html",
        status_code=400 if error else 200,
        runs=[{**r, "line": _answer_line(r)} for r in runs],
        filters=filters,
        error=error,
        agents=list(config.agents),
        routines=list(config.routines),
        statuses=STATUSES,
        more=more if len(runs) >= limit and limit < MAX_LIMIT else None,
    )


def _answer_line(run: Mapping[str, Any], width: int = 90) -> str:
    """What a run produced in one line: its answer's first line, or why it did not end
    well, or that it is running.
    """
    status = run.get("status")
    answer = " ".join(str(run.get("answer") or "").split())
    if status == "running":
        text = "running" + (f" routine {run['routine']}" if run.get("routine") else "")
    elif status != "ok" or not answer:
        text = str(run.get("reason") or answer or "")
    else:
        text = answer
    return text if len(text) <= width else text[: width - 1] + "…"


async def run_page(request: Request) -> Response:
    """One run's transcript."""
    run_id = request.path_params["run_id"]
    try:
        shown = await ctx_of(request).admin.run_show(run_id)
    except AdminError as exc:
        return render(request, "run_missing.html", status_code=404, run_id=run_id, error=str(exc))
    steps = [_step(s) for s in shown.steps]
    return render(request, "run.html", t=shown, steps=steps, answer=shown.answer.strip())


def _step(step: Mapping[str, Any]) -> dict[str, Any]:
    """A transcript step with its long values cut for the page (``input``, ``result``,
    ``text`` as shown text).
    """
    shown = dict(step)
    for key in ("input", "result", "text"):
        value = step.get(key)
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        shown[key] = cut(text, SHOWN_CHARS)
    return shown


routes: list[BaseRoute] = [
    Route("/runs", runs_page, methods=["GET"], name="runs"),
    Route("/runs/{run_id}", run_page, methods=["GET"], name="run"),
]
