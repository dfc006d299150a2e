"""The Agent pages: ``/agents`` (every agent) and ``/agents/{slug}`` (one agent).

One agent's page shows its instructions, model and fallbacks, its budget and its spend over
the last 30 days (a chart, loaded after the page from ``/agents/{slug}/spend``), its recent
runs and the improver's proposals that change it, and offers Pause, Resume and Ask. Its
state line is the live fragment ``agent`` (``/live?f=agent&agent=<slug>``).

The actions are POSTs (``/agents/{slug}/pause``, ``…/resume``, ``…/ask``), each one Admin
operation through :func:`~companyd.dashboard._actions.perform` (recorded "via dashboard").
An htmx request gets the fragment to swap in; a plain form post is redirected back to the
agent's page (303).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from datetime import date, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from companyd.clock import utc_from_ts
from companyd.config import AgentConfig
from companyd.dashboard._actions import perform
from companyd.dashboard._context import ctx_of
from companyd.dashboard._live import Live
from companyd.dashboard._pages.overview import TREE_KINDS
from companyd.dashboard._render import fragment, render

__all__ = ["SPEND_DAYS", "live", "routes"]

#: How many days the spend chart shows.
SPEND_DAYS = 30
#: How long Ask waits for the answer (the task keeps running after that).
ASK_TIMEOUT_S = 600.0


def _agent(request: Request, slug: str) -> AgentConfig | None:
    return ctx_of(request).config().agents.get(slug)


def _unknown(request: Request, slug: str) -> Response:
    known = ", ".join(sorted(ctx_of(request).config().agents))
    return render(request, "agent_unknown.html", status_code=404, slug=slug, known=known)


def _node(tree: dict[str, Any], slug: str) -> dict[str, Any] | None:
    if tree.get("kind") == "worker" and tree.get("id") == slug:
        return tree
    for child in tree.get("children", ()):
        found = _node(child, slug)
        if found is not None:
            return found
    return None


async def _state(request: Request, slug: str) -> dict[str, Any]:
    status = await ctx_of(request).admin.status()
    node = _node(status.tree, slug) or {"state": "unknown", "restarts": 0, "uptime_s": None}
    running = [r for r in status.runs_in_flight if r.get("agent") == slug]
    spend = next((a for a in status.spend.agents if a.agent == slug), None)
    return {"node": node, "running": running, "spend": spend}


async def agents(request: Request) -> Response:
    """Every agent with its title, state and link."""
    status = await ctx_of(request).admin.status()
    rows = []
    for slug, agent in ctx_of(request).config().agents.items():
        node = _node(status.tree, slug) or {"state": "unknown", "restarts": 0}
        rows.append({"slug": slug, "agent": agent, "node": node})
    return render(request, "agents.html", rows=rows)


async def agent_page(request: Request) -> Response:
    """One agent's page."""
    slug = request.path_params["slug"]
    agent = _agent(request, slug)
    if agent is None:
        return _unknown(request, slug)
    admin = ctx_of(request).admin
    state, runs, proposals = await asyncio.gather(
        _state(request, slug), admin.runs(agent=slug, limit=15), admin.proposals()
    )
    mine = [p for p in proposals.proposals if p.get("agent") == slug]
    return render(
        request,
        "agent.html",
        slug=slug,
        agent=agent,
        runs=runs.runs,
        proposals=mine,
        **state,
    )


async def agent_spend(request: Request) -> Response:
    """The 30-day spend chart of one agent (a fragment: a figure and its table)."""
    slug = request.path_params["slug"]
    agent = _agent(request, slug)
    if agent is None:
        return PlainTextResponse(f"no agent {slug!r}", 404)
    ctx = ctx_of(request)
    today = utc_from_ts(ctx.clock.time()).date()
    days = [today - timedelta(days=n) for n in range(SPEND_DAYS - 1, -1, -1)]
    reports = [await ctx.admin.spend(by="agent", period=d.isoformat()) for d in days]
    costs = [_cost_of(r.rows, slug) for r in reports]
    daily_limit = agent.budget.daily_usd if agent.budget is not None else None
    series = {
        "days": [_epoch(d) for d in days],
        "usd": costs,
        "limit": float(daily_limit) if daily_limit is not None else None,
    }
    return render(
        request,
        "fragments/agent_spend.html",
        slug=slug,
        days=list(zip(days, costs, strict=True)),
        series=json.dumps(series),
        total=sum(costs),
    )


def _epoch(d: date) -> int:
    return (d - date(1970, 1, 1)).days * 86400


def _cost_of(rows: Sequence[Mapping[str, Any]], slug: str) -> float:
    for row in rows:
        if row.get("key") == slug:
            return float(row.get("cost_usd", 0.0))
    return 0.0


def _back(request: Request) -> bool:
    """Whether to answer with a redirect back to the page (a plain form post, not htmx)."""
    return "hx-request" not in request.headers


async def _state_fragment(request: Request, slug: str, notice: str, ok: bool) -> Response:
    if _back(request):
        return RedirectResponse(f"/agents/{slug}", status_code=303)
    values = await _state(request, slug)
    html = fragment(
        request, "fragments/agent_state.html", slug=slug, notice=notice, ok=ok, **values
    )
    return Response(html, media_type="text/html")


async def _pause_or_resume(request: Request, op: str) -> Response:
    """Pause or resume the agent (Admin ``op``) and answer with its state's fragment."""
    slug = request.path_params["slug"]
    if _agent(request, slug) is None:
        return _unknown(request, slug)
    outcome = await perform(request, op, slug, agent=slug)
    return await _state_fragment(request, slug, outcome.message, outcome.ok)


async def pause(request: Request) -> Response:
    """Pause the agent (Admin ``pause``)."""
    return await _pause_or_resume(request, "pause")


async def resume(request: Request) -> Response:
    """Resume the agent (Admin ``resume``)."""
    return await _pause_or_resume(request, "resume")


async def ask(request: Request) -> Response:
    """Ask the agent a question (Admin ``ask``) and show the answer."""
    slug = request.path_params["slug"]
    if _agent(request, slug) is None:
        return _unknown(request, slug)
    form = await request.form()
    question = str(form.get("question", ""))
    outcome = await perform(
        request, "ask", slug, agent=slug, question=question, timeout=ASK_TIMEOUT_S
    )
    return render(
        request,
        "fragments/agent_answer.html" if not _back(request) else "agent_answer_page.html",
        slug=slug,
        question=question,
        outcome=outcome,
    )


async def _live_state(request: Request) -> str:
    slug = request.query_params.get("agent", "")
    if _agent(request, slug) is None:
        return ""
    values = await _state(request, slug)
    return fragment(request, "fragments/agent_state.html", slug=slug, notice="", ok=True, **values)


routes: list[BaseRoute] = [
    Route("/agents", agents, methods=["GET"], name="agents"),
    Route("/agents/{slug}", agent_page, methods=["GET"], name="agent"),
    Route("/agents/{slug}/spend", agent_spend, methods=["GET"], name="agent_spend"),
    Route("/agents/{slug}/pause", pause, methods=["POST"], name="agent_pause"),
    Route("/agents/{slug}/resume", resume, methods=["POST"], name="agent_resume"),
    Route("/agents/{slug}/ask", ask, methods=["POST"], name="agent_ask"),
]

live: list[Live] = [
    Live("agent", TREE_KINDS | {"run_started", "run_finished", "run_failed"}, _live_state, 30.0)
]
