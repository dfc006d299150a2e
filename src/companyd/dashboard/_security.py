"""The dashboard's guards, as pure ASGI middlewares (so event streams pass untouched).

* :class:`SecurityHeaders` — a Content-Security-Policy with no inline script, no
  ``unsafe-eval`` and no inline style (:data:`CSP`), no framing, no referrer (a login URL
  must not leak through ``Referer``), no MIME sniffing, and ``Cache-Control: no-store``.
* :class:`SessionGuard` — every path but :data:`PUBLIC` (and the webhooks under
  :data:`HOOKS_PREFIX`, which their signature authenticates) needs a live session cookie:
  without one a page request is redirected (303) to ``/login-needed``, which says to run
  ``companyd dashboard``; an htmx or event-stream request gets 401 (with ``HX-Redirect``).
  The session is put into ``scope["state"]["session"]`` (``request.state.session``).
* CSRF, in the same guard: a POST, PUT, PATCH or DELETE must carry the session's CSRF token
  in the ``X-CSRF-Token`` header (htmx sends it: ``hx-headers`` on ``<body>``) or in the
  form field ``csrf_token`` (``{{ csrf_field() }}`` in a form); otherwise 403. The form
  body is read (up to :data:`MAX_FORM_BYTES`) and replayed to the handler.
"""

from __future__ import annotations

import hmac
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any

from companyd.dashboard._auth import COOKIE, Sessions

__all__ = [
    "CSP",
    "HOOKS_PREFIX",
    "MAX_FORM_BYTES",
    "PUBLIC",
    "STATIC_PREFIX",
    "SecurityHeaders",
    "SessionGuard",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The Content-Security-Policy of every response.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)

_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]

#: Paths served without a session (the login itself, the page saying how to log in) and the
#: prefix of the static assets, also public.
PUBLIC = frozenset({"/login", "/login-needed"})
STATIC_PREFIX = "/static/"
#: The prefix of the routines' webhooks: no session, no CSRF token — each request is
#: authenticated by its Standard Webhooks signature (:mod:`companyd.dashboard._hooks`).
HOOKS_PREFIX = "/hooks/"

#: The largest form body the CSRF check reads.
MAX_FORM_BYTES = 1 << 20

_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class SecurityHeaders:
    """Adds the security headers (and ``no-store`` but on static assets) to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope`` with the headers added to its response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith(STATIC_PREFIX)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(_HEADERS)
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


class SessionGuard:
    """Lets through requests of a live session (and :data:`PUBLIC` paths); checks CSRF."""

    def __init__(self, app: ASGIApp, sessions: Sessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope`` if its session is live (or it is public) and a write carries the
        session's CSRF token; otherwise refuse it as the module docstring says.
        """
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        if path.startswith(HOOKS_PREFIX):
            # a webhook's signature is its authentication (companyd.dashboard._hooks)
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        session_id = _cookie(headers.get("cookie", ""), COOKIE)
        session = self.sessions.get(session_id) if session_id else None
        scope.setdefault("state", {})["session"] = session
        if session is None and path not in PUBLIC and not path.startswith(STATIC_PREFIX):
            await _refuse_unauthenticated(headers, send)
            return
        if session is None or scope.get("method", "GET") not in _UNSAFE:
            await self.app(scope, receive, send)
            return
        sent = headers.get("x-csrf-token")
        body = b""
        if sent is None:
            body, complete = await _read_body(receive)
            if not complete:
                await _plain(send, 413, "the form is too large")
                return
            if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
                form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
                sent = next(iter(form.get("csrf_token", [])), None)
        if sent is None or not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            await _plain(
                send, 403, "refused: this request has no valid CSRF token; reload the page"
            )
            return
        await self.app(scope, _replay(body, receive) if body else receive, send)


def _cookie(header: str, name: str) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # a malformed Cookie header is no session, never a 500
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return b"", False
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def _refuse_unauthenticated(headers: dict[str, str], send: Send) -> None:
    if "hx-request" in headers or "text/event-stream" in headers.get("accept", ""):
        await _plain(
            send, 401, "no session: run `companyd dashboard`", [(b"hx-redirect", b"/login-needed")]
        )
        return
    await _plain(
        send, 303, "no session: run `companyd dashboard`", [(b"location", b"/login-needed")]
    )


async def _plain(
    send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = (text + "\n").encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
