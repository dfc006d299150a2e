"""The Routines pages: ``/routines`` (every routine) and ``/routines/{name}`` (one routine's
history), with Run now.

``/routines`` is :meth:`~companyd.admin.Admin.jobs`: each routine's agent, schedule, next
fire, last outcome (with its reason) and 7-day success rate. ``/routines/{name}`` adds
:meth:`~companyd.admin.Admin.job_history` as a timeline, newest first: when each fire was
due, how it ended and why, its cost and its run. Times arrive as ISO 8601 strings (the
scheduler's JSON) and are shown in UTC.

Run now is ``POST /routines/{name}/run`` (CSRF-checked by the guard):
:func:`~companyd.dashboard.actions.perform` of ``run_job``, recorded "via dashboard". It
waits for the routine's run to end (the form shows a "running" indicator); an htmx request
gets the outcome as a notice to swap in, a plain form post the routine's page with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from companyd.admin import AdminError
from companyd.dashboard.actions import perform
from companyd.dashboard.context import ctx_of
from companyd.dashboard.render import fragment, render

__all__ = ["HISTORY", "epoch", "routes"]

#: How many fires the history shows.
HISTORY = 50


def epoch(iso: Any) -> float | None:
    """Epoch seconds of an ISO 8601 time (None for None or anything else)."""
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def _routine_row(r: Mapping[str, Any]) -> dict[str, Any]:
    last = r.get("last") or {}
    rate = (r.get("success_7d") or {}).get("rate")
    return {
        **r,
        "next_ts": epoch(r.get("next_fire")),
        "last_ts": epoch(last.get("scheduled") or last.get("started")),
        "last_outcome": last.get("outcome"),
        "last_reason": last.get("reason"),
        "last_run": last.get("run_id"),
        "rate_pct": None if rate is None else round(100 * float(rate)),
    }


def _fire_row(f: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **f,
        "scheduled_ts": epoch(f.get("scheduled")),
        "started_ts": epoch(f.get("started")),
        "ended_ts": epoch(f.get("ended")),
    }


async def routines_page(request: Request) -> Response:
    """Every routine with its next fire, last outcome and success rate."""
    try:
        jobs = await ctx_of(request).admin.jobs()
    except AdminError as exc:
        return render(request, "routines.html", status_code=503, rows=[], error=str(exc))
    rows = [_routine_row(r) for r in jobs.routines]
    return render(request, "routines.html", rows=rows, error="")


async def _routine_values(request: Request, name: str) -> tuple[int, dict[str, Any]]:
    """The routine page's status code and values (its line, its history, or the error)."""
    admin = ctx_of(request).admin
    try:
        jobs = await admin.jobs()
        history = await admin.job_history(name, limit=HISTORY)
    except AdminError as exc:
        return 404, {"name": name, "row": None, "fires": [], "error": str(exc)}
    line = next((r for r in jobs.routines if r.get("routine") == name), None)
    return 200, {
        "name": name,
        "row": _routine_row(line) if line is not None else None,
        "fires": [_fire_row(f) for f in history.fires],
        "error": "",
    }


async def routine_page(request: Request) -> Response:
    """One routine: its line and the history of its fires."""
    name = request.path_params["name"]
    status, values = await _routine_values(request, name)
    return render(request, "routine.html", status_code=status, outcome=None, **values)


async def run_now(request: Request) -> Response:
    """Fire the routine now (Admin ``run_job``) and show how its run ended."""
    name = request.path_params["name"]
    outcome = await perform(request, "run_job", name, routine=name)
    if "hx-request" in request.headers:
        html = fragment(request, "fragments/run_now.html", name=name, outcome=outcome)
        return HTMLResponse(html)
    _, values = await _routine_values(request, name)
    return render(
        request, "routine.html", status_code=200 if outcome.ok else 409, outcome=outcome, **values
    )


async def resume(request: Request) -> Response:
    """Resume a routine ``pause_after_failures`` paused (Admin ``resume_job``), then show
    its page.
    """
    name = request.path_params["name"]
    await perform(request, "resume_job", name, routine=name)
    _, values = await _routine_values(request, name)
    return render(request, "routine.html", status_code=200, outcome=None, **values)


routes: list[BaseRoute] = [
    Route("/routines", routines_page, methods=["GET"], name="routines"),
    Route("/routines/{name}", routine_page, methods=["GET"], name="routine"),
    Route("/routines/{name}/run", run_now, methods=["POST"], name="routine_run"),
    Route("/routines/{name}/resume", resume, methods=["POST"], name="routine_resume"),
]
