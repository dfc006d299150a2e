"""Logging in and out: ``/login?token=…``, ``/login-needed`` and ``/logout``.

* ``GET /login?token=…`` redeems a one-time token (:class:`~companyd.dashboard._auth.Sessions`):
  it sets the session cookie (``HttpOnly``, ``SameSite=Strict``, ``Secure`` over TLS or
  behind a proxy) and answers a page that moves on to the overview (a same-site refresh,
  so the strict cookie is sent even when the link was opened from another site). A used,
  expired or unknown token answers 403 with what to do. A ``HEAD`` (a link checker's, a
  proxy's) answers 200 and spends nothing: only the browser's ``GET`` redeems the token.
* ``GET /login-needed`` says to run ``companyd dashboard`` (where requests without a
  session are sent).
* ``POST /logout`` ends the session, and with it the session's open live streams.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from companyd.dashboard._auth import COOKIE, SESSION_TTL_S
from companyd.dashboard._context import ctx_of
from companyd.dashboard._render import render

__all__ = ["routes"]


async def login(request: Request) -> Response:
    """Redeem the one-time token of the query (on a ``GET``; a ``HEAD`` spends nothing)."""
    if request.method == "HEAD":
        return Response(status_code=200, media_type="text/html")
    ctx = ctx_of(request)
    session = ctx.sessions.redeem(request.query_params.get("token", ""))
    if session is None:
        return render(request, "login_needed.html", status_code=403, spent=True)
    request.state.session = session
    response = render(request, "logged_in.html")
    response.set_cookie(
        COOKIE,
        session.id,
        max_age=int(SESSION_TTL_S),
        path="/",
        httponly=True,
        samesite="strict",
        secure=ctx.secure_cookies,
    )
    return response


async def login_needed(request: Request) -> Response:
    """Say how to log in."""
    return render(request, "login_needed.html", spent=False)


async def logout(request: Request) -> Response:
    """End this session (the CSRF guard checked the token)."""
    session = getattr(request.state, "session", None)
    if session is not None:
        ctx_of(request).sessions.end(session.id)
    response = RedirectResponse("/login-needed", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


routes: list[BaseRoute] = [
    Route("/login", login, methods=["GET"], name="login"),
    Route("/login-needed", login_needed, methods=["GET"], name="login_needed"),
    Route("/logout", logout, methods=["POST"], name="logout"),
]
