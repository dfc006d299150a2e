"""The dashboard application in process, over a real daemon with the offline
model: login once, sessions, CSRF, the security headers, the overview and agent pages, and
an action recorded "via dashboard".
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jinja2
import pytest

from companyd._secrets import MASK, protect
from companyd.clock import ManualClock
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.dashboard._app import build_app
from companyd.dashboard._auth import COOKIE, SESSION_TTL_S, Sessions
from companyd.dashboard._context import DashboardContext
from companyd.dashboard._render import _CompiledTemplates, make_templates
from companyd.dashboard._security import CSP
from companyd.llm._offline import OfflineModel
from companyd.testing.daemon import short_dir

EXAMPLE = Path(__file__).resolve().parents[2] / "company.yaml"


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


class Site:
    """The dashboard of a running one-off daemon, and a browser-like client for it."""

    def __init__(self, daemon: Daemon, clock: ManualClock) -> None:
        self.daemon = daemon
        self.clock = clock
        self.sessions = Sessions(clock)
        ctx = DashboardContext(
            admin=daemon,
            bus=daemon.bus,
            clock=clock,
            sessions=self.sessions,
            config=lambda: daemon.config,
        )
        self.app = build_app(ctx)
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://127.0.0.1:8470"
        )

    async def login(self) -> str:
        """Log in with a fresh one-time token; the session's CSRF token."""
        token, _ = self.sessions.issue_login()
        r = await self.client.get(f"/login?token={token}")
        assert r.status_code == 200, r.text
        page = await self.client.get("/")
        assert page.status_code == 200
        found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert found is not None
        return found.group(1)


@pytest.fixture
async def site(work: Path) -> AsyncIterator[Site]:
    clock = ManualClock(start=1_800_000_000.0)
    path = work / "company.yaml"  # the example; its own dashboard off (the app runs in process)
    path.write_text(EXAMPLE.read_text() + "\ndashboard:\n  enabled: false\n")
    async with Daemon(load_config(path), work / "s", backend=OfflineModel(), offline=True) as d:
        s = Site(d, clock)
        async with s.client:
            yield s


@pytest.mark.anyio
async def test_without_a_session_pages_redirect_to_the_login_needed_page(site: Site) -> None:
    r = await site.client.get("/")
    assert r.status_code == 303 and r.headers["location"] == "/login-needed"
    page = await site.client.get("/login-needed")
    assert page.status_code == 200 and "companyd dashboard" in page.text
    htmx = await site.client.get("/agents/ceo", headers={"HX-Request": "true"})
    assert htmx.status_code == 401 and htmx.headers["hx-redirect"] == "/login-needed"


@pytest.mark.anyio
async def test_a_login_url_works_once_and_for_five_minutes(site: Site) -> None:
    token, expires = site.sessions.issue_login()
    assert expires == site.clock.time() + 300
    first = await site.client.get(f"/login?token={token}")
    assert first.status_code == 200
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    site.client.cookies.clear()
    again = await site.client.get(f"/login?token={token}")
    assert again.status_code == 403 and "companyd dashboard" in again.text
    late, _ = site.sessions.issue_login()
    site.clock.advance(301)
    expired = await site.client.get(f"/login?token={late}")
    assert expired.status_code == 403


@pytest.mark.anyio
async def test_every_response_has_the_strict_content_security_policy(site: Site) -> None:
    await site.login()
    r = await site.client.get("/")
    assert r.headers["content-security-policy"] == CSP
    assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
    assert r.headers["referrer-policy"] == "no-referrer"
    assert "<script>" not in r.text and " style=" not in r.text and "hx-on" not in r.text
    asset = await site.client.get("/static/vendor/htmx.min.js")
    assert asset.status_code == 200 and asset.headers["content-security-policy"] == CSP


@pytest.mark.anyio
async def test_the_overview_shows_every_agent_and_links_its_page(site: Site) -> None:
    await site.login()
    r = await site.client.get("/")
    for slug in site.daemon.config.agents:
        assert f'href="/agents/{slug}"' in r.text, slug
    for label in ("Overview", "Agents", "Runs", "Routines", "Spend", "Memory", "Inbox", "Config"):
        assert f">{label}</a>" in r.text


@pytest.mark.anyio
async def test_a_post_without_the_csrf_token_is_refused(site: Site) -> None:
    await site.login()
    r = await site.client.post("/agents/ceo/pause", data={})
    assert r.status_code == 403 and "CSRF" in r.text
    assert "ceo" not in site.daemon.staff.paused()
    wrong = await site.client.post("/agents/ceo/pause", headers={"X-CSRF-Token": "forged"})
    assert wrong.status_code == 403


@pytest.mark.anyio
async def test_pause_and_resume_go_through_admin_and_are_recorded_via_dashboard(
    site: Site,
) -> None:
    csrf = await site.login()
    sub = site.daemon.bus.subscribe(kinds={"operator_action"})
    r = await site.client.post("/agents/ceo/pause", data={"csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/agents/ceo"
    assert site.daemon.staff.paused().get("ceo") == "operator"
    event = sub.get_nowait()
    assert event is not None
    assert event.data == {
        "action": "pause",
        "target": "ceo",
        "via": "dashboard",
        "ok": True,
        "message": event.data["message"],
    }
    fragment = await site.client.post(
        "/agents/ceo/resume", headers={"X-CSRF-Token": csrf, "HX-Request": "true"}
    )
    assert fragment.status_code == 200 and "resumed ceo" in fragment.text
    assert "ceo" not in site.daemon.staff.paused()


@pytest.mark.anyio
async def test_an_agent_page_shows_its_model_instructions_and_actions(site: Site) -> None:
    await site.login()
    agent = site.daemon.config.agents["cfo"]
    r = await site.client.get("/agents/cfo")
    assert r.status_code == 200
    assert agent.model.primary in r.text
    assert 'id="pause"' in r.text and 'aria-label="Pause cfo"' in r.text
    assert 'sse-connect="/live?f=agent&amp;agent=cfo"' in r.text
    chart = await site.client.get("/agents/cfo/spend")
    assert chart.status_code == 200 and 'class="chart" data-series=' in chart.text
    missing = await site.client.get("/agents/nobody")
    assert missing.status_code == 404 and "cfo" in missing.text
    listing = await site.client.get("/agents")
    assert all(f'href="/agents/{slug}"' in listing.text for slug in site.daemon.config.agents)


def test_no_secret_is_rendered_whatever_the_template_prints() -> None:
    secret = "sk-ant-api03-" + "x" * 40
    protect(secret)
    templates = make_templates()
    html = templates.env.from_string("<p>{{ v }} {{ d.k }}</p>").render(v=secret, d={"k": secret})
    assert secret not in html and html.count(MASK) == 2


def test_a_second_dashboard_in_the_process_does_not_compile_its_templates_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = make_templates().env.get_template("base.html")
    env = make_templates().env
    compiled: list[str | None] = []
    compile_ = env.compile

    def counting(source: Any, name: str | None = None, *args: Any, **kwargs: Any) -> Any:
        compiled.append(name)
        return compile_(source, name, *args, **kwargs)

    monkeypatch.setattr(env, "compile", counting)
    second = env.get_template("base.html")
    assert compiled == [] and second is not first and second.name == "base.html"


def test_an_edited_template_is_compiled_again(tmp_path: Path) -> None:
    cache = _CompiledTemplates()

    def rendered() -> str:
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(tmp_path), bytecode_cache=cache)
        return env.get_template("t.html").render(v=1)

    (tmp_path / "t.html").write_text("one {{ v }}")
    assert rendered() == "one 1" and rendered() == "one 1"
    (tmp_path / "t.html").write_text("two {{ v }}")
    assert rendered() == "two 1"


@pytest.mark.anyio
async def test_ask_shows_the_answer_and_is_recorded_via_dashboard(site: Site) -> None:
    csrf = await site.login()
    sub = site.daemon.bus.subscribe(kinds={"operator_action"})
    r = await site.client.post(
        "/agents/cfo/ask",
        data={"question": "What did we spend this week?"},
        headers={"X-CSRF-Token": csrf, "HX-Request": "true"},
        timeout=60,
    )
    assert r.status_code == 200 and 'class="answer"' in r.text and "/runs/run-" in r.text
    event = sub.get_nowait()
    assert event is not None and event.data["action"] == "ask" and event.data["ok"]
    empty = await site.client.post(
        "/agents/cfo/ask", data={"question": " ", "csrf_token": csrf}, timeout=60
    )
    assert empty.status_code == 200 and "the question is empty" in empty.text
    # asked of a paused agent: why it did not run, and no link to a run that is not
    await site.daemon.pause("cfo")
    paused = await site.client.post(
        "/agents/cfo/ask",
        data={"question": "Still there?"},
        headers={"X-CSRF-Token": csrf, "HX-Request": "true"},
        timeout=60,
    )
    assert paused.status_code == 200 and 'href="/runs/"' not in paused.text, paused.text
    assert "No run · cancelled" in paused.text and "is paused" in paused.text, paused.text


@pytest.mark.anyio
async def test_a_head_on_the_login_url_does_not_spend_the_token(site: Site) -> None:
    token, _ = site.sessions.issue_login()
    head = await site.client.head(f"/login?token={token}")  # a link checker, a proxy
    assert head.status_code == 200 and "set-cookie" not in head.headers
    assert not site.client.cookies
    browser = await site.client.get(f"/login?token={token}")  # the browser's GET redeems it
    assert browser.status_code == 200 and COOKIE in browser.headers["set-cookie"]
    again = await site.client.get(f"/login?token={token}")
    assert again.status_code == 403  # and only once


async def open_stream(client: httpx.AsyncClient) -> asyncio.Task[httpx.Response]:
    """``GET /live`` in a task (the in-process transport answers when the stream ends)."""
    stream = asyncio.ensure_future(client.get("/live?f=tree&f=inflight"))
    await asyncio.sleep(0.3)
    assert not stream.done(), stream.result().text  # open, serving the session
    return stream


@pytest.mark.anyio
async def test_logout_ends_that_sessions_live_streams_and_no_other(site: Site) -> None:
    csrf = await site.login()
    other = Site.__new__(Site)  # a second browser, its own session, on the same app
    other.sessions, other.app = site.sessions, site.app
    other.client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=site.app), base_url="http://127.0.0.1:8470"
    )
    async with other.client:
        await other.login()
        mine, theirs = await open_stream(site.client), await open_stream(other.client)
        out = await site.client.post("/logout", data={"csrf_token": csrf})
        assert out.status_code == 303
        ended = await asyncio.wait_for(mine, 10)
        assert ended.status_code == 200
        await asyncio.sleep(0.3)
        assert not theirs.done()  # the other session's stream goes on
        theirs.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await theirs


@pytest.mark.anyio
async def test_a_live_stream_ends_when_its_session_expires(site: Site) -> None:
    await site.login()
    stream = await open_stream(site.client)
    site.clock.advance(SESSION_TTL_S - 60)
    await asyncio.sleep(0.3)
    assert not stream.done()
    site.clock.advance(61)
    ended = await asyncio.wait_for(stream, 10)
    assert ended.status_code == 200
    assert (await site.client.get("/")).status_code == 303  # and the session is over
