"""Live updates: server-sent events fed from the daemon's event bus.

A page module may expose ``live: list[Live]``: named fragments, each re-rendered when an
event of one of its ``kinds`` is published (and, with ``every``, at least that often). A
page subscribes to the fragments it shows with one event stream::

    <section hx-ext="sse" sse-connect="/live?f=tree&f=runs">
      <div id="tree" sse-swap="tree">{% include "fragments/tree.html" %}</div>
    </section>

``GET /live?f=<name>…`` (plus any other query values, which the fragments' ``render``
reads from the request, e.g. ``agent=ceo``) answers ``text/event-stream``: one SSE event
named after the fragment, its data the fragment's HTML, each time it is re-rendered.
Events arriving within :data:`COALESCE_S` of each other cause one render. An unknown
fragment name is a 404 naming the known ones. A stream ends when its session does (logout
or expiry, :meth:`~companyd.dashboard._auth.Sessions.wait_ended`) and when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from companyd._aio import cancel_and_wait, race
from companyd.dashboard._context import ctx_of
from companyd.events import Event, Subscription

__all__ = ["COALESCE_S", "Live", "live_endpoint"]

#: Events this close together are shown by one render.
COALESCE_S = 0.05


@dataclass(frozen=True)
class Live:
    """A fragment kept up to date over server-sent events.

    Attributes:
        name: the SSE event name (``sse-swap="<name>"`` in the page); unique over all pages.
        kinds: the event kinds after which it is re-rendered.
        render: its HTML for a request (the ``/live`` request: its query has the page's
            values, its ``state.session`` the session).
        every: re-render at least this often (seconds; None: only on events).
    """

    name: str
    kinds: frozenset[str]
    render: Callable[[Request], Awaitable[str]]
    every: float | None = None


def live_endpoint(
    fragments: Mapping[str, Live],
) -> Callable[[Request], Awaitable[Response]]:
    """The ``/live`` handler over ``fragments`` (every page's, by name)."""

    async def live(request: Request) -> Response:
        wanted = request.query_params.getlist("f")
        unknown = [n for n in wanted if n not in fragments]
        if not wanted or unknown:
            known = ", ".join(sorted(fragments)) or "none"
            return PlainTextResponse(
                f"unknown or no fragment {unknown or ''}; choose f= among: {known}", 404
            )
        chosen = [fragments[n] for n in dict.fromkeys(wanted)]
        return EventSourceResponse(_stream(request, chosen), ping=15, send_timeout=10)

    return live


async def _stream(request: Request, chosen: list[Live]) -> AsyncIterator[ServerSentEvent]:
    ctx = ctx_of(request)
    stopping: asyncio.Event = request.app.state.stopping
    session = getattr(request.state, "session", None)
    over = asyncio.ensure_future(
        race(stopping.wait(), *([ctx.sessions.wait_ended(session)] if session else []))
    )
    kinds = frozenset().union(*(f.kinds for f in chosen))
    sub = ctx.bus.subscribe(maxsize=1000, kinds=kinds)
    loop = asyncio.get_running_loop()
    due = {f.name: (loop.time() + f.every if f.every else None) for f in chosen}
    try:
        while not over.done():
            timeouts = [t - loop.time() for t in due.values() if t is not None]
            wait = max(0.0, min(timeouts)) if timeouts else None
            event = await _next(sub, over, wait)
            if over.done():
                break
            stale: set[str] = set()
            if event is not None:
                await asyncio.sleep(COALESCE_S)  # let the burst (exit, restart, start) land
                seen = {event.kind}
                while (more := sub.get_nowait()) is not None:
                    seen.add(more.kind)
                stale = {f.name for f in chosen if f.kinds & seen}
            now = loop.time()
            stale |= {n for n, t in due.items() if t is not None and t <= now}
            for fragment in chosen:
                if fragment.name in stale:
                    if fragment.every:
                        due[fragment.name] = now + fragment.every
                    html = await fragment.render(request)
                    yield ServerSentEvent(data=html, event=fragment.name)
    finally:
        sub.close()
        await cancel_and_wait(over)


async def _next(sub: Subscription, over: asyncio.Future[Any], wait: float | None) -> Event | None:
    """The next event of ``sub``, or None after ``wait`` seconds or once ``over`` is done
    (``over`` is the caller's and left running).
    """
    getter = asyncio.ensure_future(sub.get())
    try:
        done, _ = await asyncio.wait(
            {getter, over}, timeout=wait, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        if not getter.done():
            getter.cancel()
            with contextlib.suppress(asyncio.CancelledError, EOFError):
                await getter
    if getter in done and not getter.cancelled() and getter.exception() is None:
        return getter.result()
    return None
