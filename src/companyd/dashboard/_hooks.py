"""Routines started by events: ``POST /hooks/<routine>`` (docs/triggers.md).

A routine with ``trigger: {webhook: {secret_env: NAME}}`` is fired by a request signed with
the Standard Webhooks scheme (headers ``webhook-id``, ``webhook-timestamp``,
``webhook-signature``; the secret, ``whsec_…``, in the daemon's environment variable
``NAME``). The signature is the authentication: these paths are outside the login session and
the CSRF check (:mod:`companyd.dashboard._security`). The checks, in order, each before any
work the next needs:

1. the routine exists, is enabled and takes webhooks — else 404;
2. at most ``rate_limit`` requests a minute per routine (every request counts, a bad one
   too) — else 429 with ``Retry-After``;
3. the body is at most ``max_body`` bytes (``Content-Length`` first, then while reading) —
   else 413;
4. the signature verifies over the raw body and the timestamp is within 5 minutes (the
   ``standardwebhooks`` package; constant-time comparison) — else 401; a secret that is not
   set or not a valid ``whsec_`` key is the server's problem, 503, logged;
5. the body is JSON — else 400.

Then the daemon fires the routine (:meth:`companyd.admin.Admin.fire_webhook`): 202 with the
fire id (503 with ``Retry-After`` when its scheduler cannot take it now: a standby); a
``webhook-id`` already accepted for the routine is 200 with the first fire's id and nothing
runs again. The sender's retries therefore stop either way.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os

from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from companyd.admin import AdminError
from companyd.dashboard._context import ctx_of
from companyd.dashboard._security import HOOKS_PREFIX

__all__ = ["PREFIX", "RATE_WINDOW_S", "HookLimiter", "routes"]

log = logging.getLogger("companyd.dashboard.hooks")

#: The longest ``webhook-id`` taken (each accepted one is stored for replays).
MAX_WEBHOOK_ID = 256

#: Where the hooks are served; :class:`~companyd.dashboard._security.SessionGuard` lets
#: requests under it through without a session or a CSRF token.
PREFIX = HOOKS_PREFIX
#: The window ``rate_limit`` counts requests in.
RATE_WINDOW_S = 60.0


class HookLimiter:
    """At most ``limit`` requests per routine in any :data:`RATE_WINDOW_S` (a sliding
    window of arrival times; one per application, so per web-layer start).
    """

    def __init__(self) -> None:
        self._seen: dict[str, collections.deque[float]] = {}

    def wait(self, routine: str, limit: int, now: float) -> float:
        """Count a request of ``routine`` at ``now``: 0 if it may go on, else the seconds
        until one would be accepted (the request is not counted then).
        """
        seen = self._seen.setdefault(routine, collections.deque())
        while seen and seen[0] <= now - RATE_WINDOW_S:
            seen.popleft()
        if len(seen) >= limit:
            return max(0.001, seen[0] + RATE_WINDOW_S - now)
        seen.append(now)
        return 0.0


def _text(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    return PlainTextResponse(text + "\n", status_code=status, headers=headers)


async def _body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None as soon as it is longer than ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            return None
    return bytes(chunks)


async def hook(request: Request) -> Response:
    """``POST /hooks/<routine>``: verify, then fire (see the module docstring)."""
    ctx = ctx_of(request)
    routine = request.path_params["routine"]
    r = ctx.config().routines.get(routine)
    if r is None or not r.enabled or r.webhook is None:
        return _text(404, f"no enabled routine {routine!r} takes webhooks here")
    spec = r.webhook
    limiter: HookLimiter = request.app.state.hook_limiter
    wait = limiter.wait(routine, spec.rate_limit, ctx.clock.time())
    if wait:
        return _text(
            429,
            f"more than {spec.rate_limit} requests a minute for routine {routine!r}; retry later",
            {"retry-after": str(math.ceil(wait))},
        )
    body = await _body(request, spec.max_body)
    if body is None:
        return _text(413, f"the body is larger than this hook's max_body ({spec.max_body} bytes)")
    secret = os.environ.get(spec.secret_env, "")
    try:
        verifier = Webhook(secret) if secret else None
    except Exception:  # not base64 after whsec_: the operator's mistake, not the sender's
        verifier = None
    if verifier is None:
        log.error(
            "webhook of routine %r refused: environment variable %s is %s; set it to the "
            "sender's signing secret (whsec_…) and restart the daemon",
            routine,
            spec.secret_env,
            "not a valid whsec_ secret" if secret else "not set",
        )
        return _text(503, "this hook's secret is not configured on the server")
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        verifier.verify(body, headers, json_parse=False)
    except WebhookVerificationError as exc:
        return _text(401, f"refused: {exc}")
    except ValueError:  # a body that is not UTF-8, a malformed signature header
        return _text(401, "refused: the signature cannot be checked")
    if len(headers.get("webhook-id", "")) > MAX_WEBHOOK_ID:
        # it is stored (a replay of the same id runs nothing twice): a sender's ids are
        # short (Standard Webhooks: msg_…); a huge one is refused, not kept
        return _text(400, f"the webhook-id is longer than {MAX_WEBHOOK_ID} characters")
    try:
        payload = json.loads(body)
    except ValueError:
        return _text(400, "the body must be JSON")
    text = json.dumps(payload, ensure_ascii=False, indent=1)
    try:
        fired = await ctx.admin.fire_webhook(routine, headers["webhook-id"], text)
    except AdminError as exc:
        # the routine was checked above: the scheduler cannot take it now (a standby, a
        # daemon starting or out of disk); the id was not remembered, so the retry runs it
        log.warning("webhook of routine %r not taken: %s", routine, exc)
        return _text(503, str(exc), {"retry-after": "30"})
    return JSONResponse(
        {"routine": routine, "fire_id": fired.fire_id, "replay": fired.replay},
        status_code=200 if fired.replay else 202,
    )


routes = [Route(PREFIX + "{routine}", hook, methods=["POST"], name="hook")]
