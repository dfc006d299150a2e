"""Turning a template into a page: :func:`render`, the Jinja2 environment and its helpers.

Every page renders through :func:`render` (a full page extending ``base.html``, or a
fragment for htmx and server-sent events). The templates receive, besides the page's own
values:

* ``csrf_token`` — the session's CSRF token, and ``csrf_field()`` — the hidden form field
  carrying it (every ``<form method="post">`` contains ``{{ csrf_field() }}``);
* ``attention`` — the attention strip (:mod:`companyd.dashboard._attention`; None
  outside a page request);
* ``nav`` — the nine pages as ``(label, href)`` and ``active`` — the href of the current one;
* ``company`` — the company's name, and ``timezone`` — its zone (``company.timezone``), the
  one every time on a page is shown in;
* ``money_places(…)`` — one precision for all the money of a table (every money cell of
  a table is ``| usd(money)`` with it);
* filters ``usd`` (``$1.23``), ``when`` (epoch seconds → ``2026-11-25 23:14 CET``, in the
  company's zone),
  ``duration`` (seconds → ``3h 02m``) and ``redact``.

**No secret is rendered**: every ``{{ … }}`` output passes the one redactor
(:func:`companyd._secrets.redact`, as Jinja's ``finalize``) before it is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.templating import Jinja2Templates

from companyd._secrets import redact
from companyd.admin import format_usd, format_when, usd_places

__all__ = ["NAV", "TEMPLATES", "fragment", "make_templates", "render", "section_of"]

#: Where the templates are.
TEMPLATES = Path(__file__).parent / "templates"

#: The pages of the navigation bar, in order: (label, href).
NAV: tuple[tuple[str, str], ...] = (
    ("Overview", "/"),
    ("Today", "/today"),
    ("Agents", "/agents"),
    ("Runs", "/runs"),
    ("Routines", "/routines"),
    ("Spend", "/spend"),
    ("Memory", "/memory"),
    ("Inbox", "/inbox"),
    ("Config", "/config"),
)


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return Markup(redact(str(value)))
    if isinstance(value, str):
        return redact(value)
    return value


@jinja2.pass_context
def _csrf_field(context: jinja2.runtime.Context) -> Markup:
    token = context.get("csrf_token") or ""
    return Markup('<input type="hidden" name="csrf_token" value="{}">').format(token)


def usd(value: Any, places: int | None = None) -> str:
    """``$1.23`` (``$0.0042`` under a cent, more decimals where that is what it takes for
    an amount that is not zero to show as not zero; ``–`` for None). With ``places`` (one
    table's :func:`money_places`) exactly that many decimals.
    """
    if value is None or isinstance(value, jinja2.Undefined):
        return "–"
    amount = float(value)
    return format_usd(amount, money_places(amount) if places is None else places)


def money_places(*values: Any) -> int:
    """The decimals of every amount of one table (or list).

    Two, four when an amount is under a cent, more where that is what it takes for the
    smallest amount that is not zero to show as not zero — so a table shows ``$0.0042``
    and ``$1.2000``, never ``$0.0042`` above ``$1.20``. ``values``: amounts, or iterables
    of them (nested; None and missing ones are skipped). In a template::

        {% set money = money_places(runs | map(attribute="cost_usd", default=none)) %}
        {{ r.cost_usd | usd(money) }}
    """
    amounts = list(_amounts(values))
    return usd_places(amounts, minimum=4 if any(0 < abs(a) < 0.01 for a in amounts) else 2)


def _amounts(values: Iterable[Any]) -> Iterator[float]:
    for v in values:
        if v is None or isinstance(v, bool | jinja2.Undefined):
            continue
        if isinstance(v, int | float | Decimal):
            if math.isfinite(v):
                yield float(v)
        elif isinstance(v, str):
            try:
                f = float(v)
            except ValueError:
                continue
            if math.isfinite(f):
                yield f
        elif isinstance(v, Iterable):
            yield from _amounts(v)


def when(ts: Any, timezone: str = "UTC") -> str:
    """Epoch seconds as ``2026-11-25 23:14 CET`` in ``timezone``, the zone named as an alert's
    footer names it (:func:`companyd.admin.format_when`); ``–`` for None.
    """
    if ts is None:
        return "–"
    return format_when(float(ts), timezone)


@jinja2.pass_context
def _when_filter(context: jinja2.runtime.Context, ts: Any) -> str:
    """``{{ ts | when }}``: :func:`when` in the zone of the page (its ``timezone``)."""
    return when(ts, str(context.get("timezone") or "UTC"))


def duration(seconds: Any) -> str:
    """Seconds as ``45s``, ``12m 03s``, ``3h 02m`` or ``4d 07h`` (``–`` for None)."""
    if seconds is None:
        return "–"
    s = max(0, int(float(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


class _CompiledTemplates(jinja2.BytecodeCache):
    """The dashboard's compiled templates, kept for the process: every environment
    :func:`make_templates` builds loads a template it has seen from here instead of
    compiling it again.

    Compiling the templates (Jinja's lexer, parser and code generator, then Python's
    ``compile``) is most of the first request to each page, and a process that builds the
    dashboard more than once (the test suite builds it once a test) paid it every time.
    Jinja checks each entry against its template's source (a SHA-1 of the text), so an
    edited template is compiled again. Only :func:`make_templates` uses this cache: the
    code depends on the environment's options, which it keeps the same.
    """

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)  # resets the bucket on another checksum

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()

    def clear(self) -> None:
        self._code.clear()


_COMPILED = _CompiledTemplates()


def make_templates() -> Jinja2Templates:
    """The dashboard's template environment (autoescaped, redacting, with the helpers);
    its compiled templates are shared with every other one in the process.
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        bytecode_cache=_COMPILED,
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["csrf_field"] = _csrf_field
    env.globals["nav"] = NAV
    env.globals["money_places"] = money_places
    env.filters.update(usd=usd, when=_when_filter, duration=duration, redact=redact)
    return Jinja2Templates(env=env)


def section_of(path: str) -> str:
    """The navigation href ``path`` belongs to (``/agents/ceo`` → ``/agents``)."""
    for _, href in NAV[1:]:
        if path == href or path.startswith(href + "/"):
            return href
    return "/"


def render(request: Request, template: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    """``template`` rendered with ``values`` and the common ones (see the module docstring)."""
    templates: Jinja2Templates = request.app.state.templates
    session = getattr(request.state, "session", None)
    ctx = request.app.state.ctx
    common = {
        "csrf_token": session.csrf if session is not None else "",
        "active": section_of(request.url.path),
        "company": ctx.config().name,
        "timezone": ctx.config().timezone,
        # the attention strip of base.html (computed by AttentionMiddleware; None: no strip)
        "attention": getattr(request.state, "attention", None),
    }
    return templates.TemplateResponse(
        request, template, {**common, **values}, status_code=status_code
    )


def fragment(request: Request, template: str, **values: Any) -> str:
    """``template`` rendered as :func:`render` does, as a string (a live fragment's HTML)."""
    return bytes(render(request, template, **values).body).decode()
