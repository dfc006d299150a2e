"""The Routines pages: ``/routines`` (every routine) and ``/routines/{name}`` (one routine:
what it asks, where its result goes, its last result and its history), with Run now,
Reload and Raise budget.

``/routines`` is :meth:`~companyd.admin.Admin.jobs`: each routine's agent, schedule, next
fire, last outcome (with its reason) and 7-day success rate. ``/routines/{name}`` adds
:meth:`~companyd.admin.Admin.job_history` as a timeline, newest first: when each fire was
due, how it ended and why, its cost and its run. Times arrive as ISO 8601 strings (the
scheduler's JSON) and are shown in UTC.

The routine's page also shows, from the running configuration, its task (``description``),
``expected_output``, resolved ``deliver`` (the effective default included) and
``approval``, and its last result (the latest finished run of the routine,
:meth:`~companyd.admin.Admin.runs`, its text cut at
:data:`~companyd.dashboard._pages.today.TEXT_LIMIT` characters).

Reload is ``POST /routines/{name}/reload`` (:meth:`~companyd.admin.Admin.reload`, as
``companyd reload``) and Raise budget ``POST /routines/{name}/raise`` with ``usd`` (today's
budget of the routine's agent, :meth:`~companyd.admin.Admin.raise_budget`, as ``companyd
budget raise``): both through :func:`~companyd.dashboard._actions.perform`, recorded "via
dashboard"; an htmx request gets the outcome to swap in, a plain post the page with it.

Run now is ``POST /routines/{name}/run`` (CSRF-checked by the guard):
:func:`~companyd.dashboard._actions.perform` of ``run_job``, recorded "via dashboard". It
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
from companyd.dashboard._actions import Outcome, perform
from companyd.dashboard._context import ctx_of
from companyd.dashboard._pages.today import TEXT_LIMIT, bounded
from companyd.dashboard._render import fragment, render

__all__ = ["HISTORY", "dollars", "epoch", "routes"]

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
        return 404, {
            "name": name, "row": None, "spec": None, "last_result": None, "fires": [],
            "error": str(exc),
        }  # fmt: skip
    line = next((r for r in jobs.routines if r.get("routine") == name), None)
    try:
        last = (await admin.runs(routine=name, limit=1, finished=True)).runs
    except AdminError:
        last = []
    result: dict[str, Any] | None = None
    if last:
        text, size = bounded(last[0].get("answer"))
        result = {**last[0], "text": text, "size": size, "cut": size > TEXT_LIMIT}
    return 200, {
        "name": name,
        "row": _routine_row(line) if line is not None else None,
        "spec": ctx_of(request).config().routines.get(name),
        "last_result": result,
        "fires": [_fire_row(f) for f in history.fires],
        "error": "",
    }


async def routine_page(request: Request) -> Response:
    """One routine: its line and the history of its fires."""
    name = request.path_params["name"]
    status, values = await _routine_values(request, name)
    return render(request, "routine.html", status_code=status, outcome=None, action=None, **values)


async def run_now(request: Request) -> Response:
    """Fire the routine now (Admin ``run_job``) and show how its run ended."""
    name = request.path_params["name"]
    outcome = await perform(request, "run_job", name, routine=name)
    if "hx-request" in request.headers:
        html = fragment(request, "fragments/run_now.html", name=name, outcome=outcome)
        return HTMLResponse(html)
    _, values = await _routine_values(request, name)
    return render(
        request,
        "routine.html",
        status_code=200 if outcome.ok else 409,
        outcome=outcome,
        action=None,
        **values,
    )


async def resume(request: Request) -> Response:
    """Resume a routine ``pause_after_failures`` paused (Admin ``resume_job``), then show
    its page.
    """
    name = request.path_params["name"]
    await perform(request, "resume_job", name, routine=name)
    _, values = await _routine_values(request, name)
    return render(request, "routine.html", status_code=200, outcome=None, action=None, **values)


async def _answer_action(request: Request, name: str, outcome: Outcome) -> Response:
    """An action's outcome: the notice for htmx, else the routine's page with it."""
    if "hx-request" in request.headers:
        return HTMLResponse(fragment(request, "fragments/routine_action.html", action=outcome))
    _, values = await _routine_values(request, name)
    return render(
        request,
        "routine.html",
        status_code=200 if outcome.ok else 409,
        outcome=None,
        action=outcome,
        **values,
    )


async def reload(request: Request) -> Response:
    """Re-read company.yaml (Admin ``reload``, as ``companyd reload``)."""
    name = request.path_params["name"]
    return await _answer_action(request, name, await perform(request, "reload", "company.yaml"))


def dollars(text: str) -> float | None:
    """``text`` as a positive amount of dollars (``5``, ``2.50``, ``$3``); None otherwise."""
    try:
        usd = float(text.strip().removeprefix("$").replace(",", ""))
    except ValueError:
        return None
    return usd if 0 < usd < float("inf") else None


async def raise_budget(request: Request) -> Response:
    """Raise today's budget of the routine's agent by ``usd`` (Admin ``raise_budget``, as
    ``companyd budget raise``).
    """
    name = request.path_params["name"]
    form = await request.form()
    given = str(form.get("usd", ""))
    spec = ctx_of(request).config().routines.get(name)
    agent = str(form.get("agent", "")) or (spec.assignee if spec is not None else "")
    usd = dollars(given)
    if usd is None:
        refused = Outcome(
            ok=False,
            message=f"expected a positive amount of dollars such as 5 or 2.50, got {given!r}; "
            "nothing was raised",
        )
        return await _answer_action(request, name, refused)
    outcome = await perform(request, "raise_budget", agent, agent=agent, usd=usd)
    return await _answer_action(request, name, outcome)


routes: list[BaseRoute] = [
    Route("/routines", routines_page, methods=["GET"], name="routines"),
    Route("/routines/{name}", routine_page, methods=["GET"], name="routine"),
    Route("/routines/{name}/run", run_now, methods=["POST"], name="routine_run"),
    Route("/routines/{name}/resume", resume, methods=["POST"], name="routine_resume"),
    Route("/routines/{name}/reload", reload, methods=["POST"], name="routine_reload"),
    Route("/routines/{name}/raise", raise_budget, methods=["POST"], name="routine_raise"),
]
