"""The Memory pages: ``/memory`` (search and recent changes) and ``/memory/entity?name=…``
(one entity, its relations and its neighbours as a small graph).

Read-only, all through :class:`~companyd.admin.Admin`: ``memory_search`` (``q``; empty:
the first entities in file order), ``memory_changes`` (the latest writes through the
daemon: when, which tool, which agent, the entities touched) and ``memory_entity``
(``name``, ``depth`` 1–3): its type and observations, its relations (each other end a
link), and its neighbourhood drawn as an SVG rendered on the server
(:func:`companyd.dashboard._graph.ring_layout`; the nodes are links, the same neighbours are
listed as text beside it). The entity's name is a query value, not a path segment, because
a name may hold any character. An unknown entity is a 404 with the daemon's message.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from companyd.admin import AdminError
from companyd.dashboard._context import ctx_of
from companyd.dashboard._graph import ring_layout
from companyd.dashboard._render import render

__all__ = ["CHANGES", "RESULTS", "routes"]

#: How many search results and recent changes the page shows.
RESULTS = 50
CHANGES = 30


async def memory_page(request: Request) -> Response:
    """Search memory (``q``) and the recent changes."""
    admin = ctx_of(request).admin
    query = request.query_params.get("q", "")
    error = ""
    found = None
    try:
        found = await admin.memory_search(query, limit=RESULTS)
        changes = (await admin.memory_changes(limit=CHANGES)).changes
    except AdminError as exc:
        error, changes = str(exc), []
    return render(
        request,
        "memory.html",
        status_code=503 if error else 200,
        query=query,
        found=found,
        changes=changes,
        error=error,
    )


def _depth(text: str | None) -> int:
    try:
        return max(1, min(int(text or 1), 3))
    except ValueError:
        return 1


async def entity_page(request: Request) -> Response:
    """One entity with its relations and neighbourhood."""
    name = request.query_params.get("name", "")
    depth = _depth(request.query_params.get("depth"))
    try:
        entity = await ctx_of(request).admin.memory_entity(name, depth=depth)
    except AdminError as exc:
        return render(request, "memory_missing.html", status_code=404, name=name, error=str(exc))
    layout = ring_layout(entity.name, entity.neighbours, entity.others, entity.edges)
    return render(request, "memory_entity.html", e=entity, layout=layout, depth=depth)


routes: list[BaseRoute] = [
    Route("/memory", memory_page, methods=["GET"], name="memory"),
    Route("/memory/entity", entity_page, methods=["GET"], name="memory_entity"),
]
