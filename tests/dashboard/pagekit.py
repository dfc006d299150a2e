"""A real daemon in process (offline model, real stores) with its dashboard and a logged-in
client, for the tests of the Runs, Routines, Spend, Memory, Inbox and Config pages.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from pathlib import Path

import httpx

from companyd.clock import ManualClock
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.dashboard._app import build_app
from companyd.dashboard._auth import Sessions
from companyd.dashboard._context import DashboardContext
from companyd.llm._offline import OfflineModel

#: A configured secret (the Anthropic key's variable) that the founder also pasted into the
#: company's context: no page may show it.
SECRET = "pageco-secret-value-7731"
KEY_VAR = "PAGE_CO_API_KEY"

COMPANY = f"""\
schema: companyd/v1
company:
  name: Page Co
  timezone: UTC
  context: "Staging password: {SECRET}. Never repeat it."
  budget: {{daily_usd: 10, monthly_usd: 100}}
anthropic:
  api_key_env: {KEY_VAR}
agents:
  ceo: {{title: CEO, instructions: You are the ceo.}}
  cfo:
    title: CFO
    instructions: You are the cfo.
    reports_to: ceo
    budget: {{daily_usd: 2}}
routines:
  weekly-review:
    assignee: cfo
    description: Review the week's spend and flag anything unusual.
    trigger: {{cron: "0 9 * * mon"}}
"""


class Site:
    """The dashboard of a running daemon and a browser-like client for it."""

    def __init__(self, daemon: Daemon, clock: ManualClock) -> None:
        self.daemon = daemon
        self.sessions = Sessions(clock)
        ctx = DashboardContext(
            admin=daemon,
            bus=daemon.bus,
            clock=daemon.clock,
            sessions=self.sessions,
            config=lambda: daemon.config,
        )
        self.app = build_app(ctx)
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://127.0.0.1:8470"
        )
        self.csrf = ""

    async def login(self) -> str:
        """Log in with a one-time token; the session's CSRF token (also kept as ``csrf``)."""
        token, _ = self.sessions.issue_login()
        r = await self.client.get(f"/login?token={token}")
        assert r.status_code == 200, r.text
        page = await self.client.get("/")
        found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert found is not None
        self.csrf = found.group(1)
        return self.csrf

    async def get(self, url: str, status: int = 200) -> httpx.Response:
        """GET ``url``, expecting ``status``."""
        r = await self.client.get(url)
        assert r.status_code == status, (url, r.status_code, r.text[:2000])
        return r

    async def post(
        self, url: str, data: dict[str, str] | None = None, *, htmx: bool = False
    ) -> httpx.Response:
        """POST a form to ``url`` with the session's CSRF token (as htmx sends it with
        ``htmx``: the header, and ``HX-Request``).
        """
        if htmx:
            headers = {"X-CSRF-Token": self.csrf, "HX-Request": "true"}
            return await self.client.post(url, data=data or {}, headers=headers)
        return await self.client.post(url, data={"csrf_token": self.csrf, **(data or {})})


@asynccontextmanager
async def running_site(work: Path, company: str = COMPANY) -> AsyncIterator[Site]:
    """A daemon for ``company`` (:data:`COMPANY` by default) in ``work`` (started, not
    one-off) and its dashboard, logged in. The caller has set :data:`KEY_VAR` to
    :data:`SECRET` in the environment.
    """
    path = work / "company.yaml"
    path.write_text(company, encoding="utf-8")
    cfg = load_config(path)  # registers the secret with the redactor, as `companyd run` does
    async with Daemon(cfg, work / "s", backend=OfflineModel(), offline=True) as d:
        site = Site(d, ManualClock(start=d.clock.time()))
        async with site.client:
            await site.login()
            yield site


class Page(HTMLParser):
    """What the accessibility and CSP checks read from a page: inline scripts and styles,
    form controls and their labels, POST forms and whether they carry the CSRF field.
    """

    def __init__(self, html: str) -> None:
        super().__init__()
        self.inline_scripts = 0
        self.style_attributes = 0
        self.handlers: list[str] = []
        self.labels: set[str] = set()
        self.controls: list[dict[str, str]] = []
        self.post_forms = 0
        self.post_forms_with_csrf = 0
        self._in_post_form = False
        self._in_script = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "style" in a:
            self.style_attributes += 1
        self.handlers += [k for k in a if k.startswith("on") or k.startswith("hx-on")]
        if tag == "script":
            self._in_script = "src" not in a
        if tag == "label" and a.get("for"):
            self.labels.add(a["for"])
        if tag == "form" and a.get("method", "get").lower() == "post":
            self.post_forms += 1
            self._in_post_form = True
        if tag == "input" and a.get("name") == "csrf_token" and self._in_post_form:
            self.post_forms_with_csrf += 1
        if tag in ("input", "select", "textarea", "button") and a.get("type") != "hidden":
            self.controls.append({"tag": tag, **a})

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._in_post_form = False
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_scripts += 1

    def unnamed_controls(self) -> list[dict[str, str]]:
        """Controls with no accessible name: no label, no aria-label, and (a button) no
        text — buttons here always have text, so only their aria-label is optional.
        """
        named = self.labels
        return [
            c
            for c in self.controls
            if c["tag"] != "button" and c.get("id", "") not in named and not c.get("aria-label")
        ]
