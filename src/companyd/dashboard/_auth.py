"""One-time login tokens and the sessions they open: :class:`Sessions`.

``companyd dashboard`` asks the daemon (Admin ``dashboard_login``) for a login URL; its
token is valid :data:`LOGIN_TTL_S` seconds on the daemon's clock and only once. Redeeming
it opens a :class:`Session`: a random id (the ``HttpOnly``, ``SameSite=Strict`` cookie) and
its own CSRF token, which every form and POST of that session must carry. Sessions live
:data:`SESSION_TTL_S` seconds and in memory only: a daemon restart logs everyone out (run
``companyd dashboard`` again). Tokens and session ids are kept as SHA-256 digests, so a
dictionary lookup never compares a secret byte by byte.

One :class:`Sessions` per daemon, owned by it (not by the web layer, whose restart must not
log anyone out); it is only touched from the event loop. :meth:`Sessions.wait_ended`
returns when a session is logged out or expires: the live event streams it opened end then.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets

from companyd._aio import race
from companyd._frozen import Frozen
from companyd.clock import Clock

__all__ = ["COOKIE", "LOGIN_TTL_S", "SESSION_TTL_S", "Session", "Sessions"]

#: How long a login URL is valid.
LOGIN_TTL_S = 300.0
#: How long a session lasts from its login.
SESSION_TTL_S = 12 * 3600.0
#: The session cookie's name.
COOKIE = "companyd_session"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Session(Frozen):
    """A logged-in browser: ``id`` (the cookie's value), ``csrf`` (the token its forms and
    POSTs carry), ``expires_at`` (epoch seconds on the daemon's clock).
    """

    id: str
    csrf: str
    expires_at: float


class Sessions:
    """Login tokens (single use, :data:`LOGIN_TTL_S`) and sessions (:data:`SESSION_TTL_S`)."""

    def __init__(
        self, clock: Clock, login_ttl: float = LOGIN_TTL_S, session_ttl: float = SESSION_TTL_S
    ) -> None:
        self._clock = clock
        self._login_ttl = login_ttl
        self._session_ttl = session_ttl
        self._logins: dict[str, float] = {}  # digest of a token -> its expiry
        self._sessions: dict[str, Session] = {}  # digest of a session id -> the session
        # digest of a session id -> set when it is logged out (made by wait_ended)
        self._ended: dict[str, asyncio.Event] = {}

    def issue_login(self) -> tuple[str, float]:
        """A new one-time login token and when it expires (epoch seconds)."""
        self._forget_expired()
        token = secrets.token_urlsafe(32)
        expires = self._clock.time() + self._login_ttl
        self._logins[_digest(token)] = expires
        return token, expires

    def redeem(self, token: str) -> Session | None:
        """Open a session with ``token``, or None when it is unknown, used or expired (it is
        spent either way).
        """
        expires = self._logins.pop(_digest(token), None)
        if expires is None or self._clock.time() >= expires:
            return None
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            expires_at=self._clock.time() + self._session_ttl,
        )
        self._sessions[_digest(session.id)] = session
        return session

    def get(self, session_id: str) -> Session | None:
        """The live session of cookie value ``session_id``, or None."""
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is not None and self._clock.time() >= session.expires_at:
            del self._sessions[key]
            return None
        return session

    def end(self, session_id: str) -> None:
        """Log ``session_id`` out (nothing when it is unknown); its waiters return."""
        key = _digest(session_id)
        self._sessions.pop(key, None)
        ended = self._ended.pop(key, None)
        if ended is not None:
            ended.set()

    async def wait_ended(self, session: Session) -> None:
        """Return when ``session`` is logged out (:meth:`end`) or expires (on the clock);
        at once when it is already over.
        """
        key = _digest(session.id)
        if self._sessions.get(key) is not session:
            return
        ended = self._ended.setdefault(key, asyncio.Event())
        left = session.expires_at - self._clock.time()
        if left <= 0:
            return
        await race(ended.wait(), self._clock.sleep(left))

    def _forget_expired(self) -> None:
        now = self._clock.time()
        self._logins = {k: t for k, t in self._logins.items() if t > now}
        self._sessions = {k: s for k, s in self._sessions.items() if s.expires_at > now}
        self._ended = {k: e for k, e in self._ended.items() if k in self._sessions}
