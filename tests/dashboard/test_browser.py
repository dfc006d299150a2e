"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``
through selenium) against a real ``companyd run`` of the example company (issue 18's
acceptance): log in with the one-time URL; the overview shows every agent; a crash of an
agent (the ``debug crash`` hook) shows on the overview within 1 s without a reload; Pause
on an agent page pauses it (``companyd status --json``); a POST without the CSRF token is
refused; the login URL works once; no session → the page saying to run ``companyd
dashboard``. Screenshots of the pages at desktop and phone width go to
``$COMPANYD_SCREENSHOTS`` (or the test's temporary directory).

Skipped, saying what to install, only where no browser is installed.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from companyd.daemon._control_client import ControlClient
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import CliResult
from companyd.testing.inprocess import cli_in_thread

from .browserkit import NEEDS_BROWSER, as_new, chromium, running_daemon, screenshots_dir
from .browserkit import screenshot as _screenshot

EXAMPLE = Path(__file__).resolve().parents[2] / "company.yaml"
DESKTOP = (1280, 1000)

# one worker runs the module (`--dist loadgroup`), so its daemon starts once
pytestmark = [NEEDS_BROWSER, pytest.mark.xdist_group("browser")]


@dataclass
class Company:
    """A running ``companyd run --offline`` of the example company, dashboard on port 0."""

    config: Path
    state: Path
    log: Path

    def cli(self, *argv: str) -> CliResult:
        """``companyd ARGV`` against the daemon, by the CLI's entry point in this process:
        a process would add a Python start-up per call and prove nothing more here
        (docs/testing.md, "Adding an end-to-end test").
        """
        return cli_in_thread([*argv, "--config", str(self.config), "--state-dir", str(self.state)])

    def login_url(self) -> str:
        done = self.cli("dashboard", "--json")
        assert done.rc == 0, done.err
        url = json.loads(done.out)["url"]
        assert isinstance(url, str) and "/login?token=" in url
        return url

    def base(self) -> str:
        return self.login_url().split("/login?", 1)[0]

    def status(self) -> dict[str, Any]:
        done = self.cli("status", "--json")
        assert done.rc == 0, done.err
        result: dict[str, Any] = json.loads(done.out)
        return result

    def control(self, op: str, **args: Any) -> dict[str, Any]:
        return ControlClient(self.state / "companyd.sock", timeout=10.0).call(op, **args)


@pytest.fixture(scope="module")
def company() -> Iterator[Company]:
    with short_dir() as work:
        config = work / "company.yaml"
        config.write_text(
            EXAMPLE.read_text(encoding="utf-8") + '\ndashboard:\n  listen: "127.0.0.1:0"\n',
            encoding="utf-8",
        )
        log = work / "daemon.log"
        env = {**os.environ, "COMPANYD_DEBUG": "1"}
        env.pop("NOTIFY_SOCKET", None)
        argv = ["run", "--offline", "--config", str(config), "--state-dir", str(work / "s"),
                "--log-format", "json"]  # fmt: skip
        c = Company(config, work / "s", log)
        with running_daemon(argv, log, env, lambda: c.cli("dashboard", "--json").rc == 0):
            yield c


@pytest.fixture(scope="module")
def shots() -> Iterator[Path]:
    with screenshots_dir() as path:
        yield path


@pytest.fixture(scope="module")
def shared_chromium() -> Iterator[webdriver.Chrome]:
    with chromium(DESKTOP) as driver:
        yield driver


@pytest.fixture
def browser(shared_chromium: webdriver.Chrome) -> webdriver.Chrome:
    """The module's Chromium as new (browserkit.as_new): no cookie, no tab left over."""
    return as_new(shared_chromium, DESKTOP)


def log_in(browser: webdriver.Chrome, company: Company) -> str:
    """Log in with a fresh one-time URL; the dashboard's base URL."""
    url = company.login_url()
    browser.get(url)
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "ul.tree"))
    return url.split("/login?", 1)[0]


def node(browser: webdriver.Chrome, agent: str) -> Any:
    return browser.find_element(By.CSS_SELECTOR, f'li.node[data-node$="/{agent}"]')


def click(browser: webdriver.Chrome, element_id: str) -> None:
    """Click the element ``element_id``, again if a live swap replaced it meanwhile."""

    def clicked(d: webdriver.Chrome) -> bool:
        d.find_element(By.ID, element_id).click()
        return True

    WebDriverWait(browser, 10, ignored_exceptions=(StaleElementReferenceException,)).until(clicked)


def shown(browser: webdriver.Chrome, agent: str) -> tuple[int, str]:
    """The org chart's restart count and classes of ``agent``'s node, read in one script (a
    live swap may replace the node between two WebDriver calls).
    """
    found = browser.execute_script(
        "const n = document.querySelector(arguments[0]);"
        "return n ? [parseInt(n.dataset.restarts, 10), n.className] : [-1, ''];",
        f'li.node[data-node$="/{agent}"]',
    )
    return int(found[0]), str(found[1])


def screenshot(browser: webdriver.Chrome, shots: Path, name: str) -> None:
    _screenshot(browser, shots, name, DESKTOP)


def test_no_session_leads_to_the_page_saying_to_run_companyd_dashboard(
    browser: webdriver.Chrome, company: Company
) -> None:
    base = company.base()
    assert company.status()["daemon"]["dashboard"] == base  # the address bound for port 0
    browser.get(base + "/")
    assert browser.current_url.endswith("/login-needed")
    assert "companyd dashboard" in browser.find_element(By.TAG_NAME, "main").text


def test_the_login_url_works_once(browser: webdriver.Chrome, company: Company) -> None:
    url = company.login_url()
    browser.get(url)
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "ul.tree"))
    browser.delete_all_cookies()
    browser.get(url)
    text = browser.find_element(By.TAG_NAME, "main").text
    assert "cannot be used" in text and "companyd dashboard" in text
    assert not browser.find_elements(By.CSS_SELECTOR, "ul.tree")


def test_the_overview_shows_every_agent_and_a_crash_within_one_second(
    browser: webdriver.Chrome, company: Company, shots: Path
) -> None:
    log_in(browser, company)
    agents = {n["id"] for n in _workers(company.status()["tree"]) if n["id"] in _slugs()}
    assert agents == _slugs()
    names = browser.execute_script(
        "return [...document.querySelectorAll('li.node a.node-name')].map(a => a.textContent)"
    )
    assert sorted(names) == sorted(agents)  # each agent once, linked to its page
    screenshot(browser, shots, "overview")
    before, _ = shown(browser, "cfo")
    marker = browser.execute_script("return window.__companyd_no_reload = 1;")
    assert marker == 1

    assert company.control("debug", action="crash", target="cfo")["crashed"]
    # the window: the crash shows within 1 s (the restart count moves, or the
    # node leaves "running" while its supervisor restarts it)
    WebDriverWait(browser, 1.0, poll_frequency=0.05).until(
        lambda d: shown(d, "cfo")[0] > before or "state-running" not in shown(d, "cfo")[1]
    )
    WebDriverWait(browser, 30).until(lambda d: shown(d, "cfo")[0] == before + 1)
    assert "flash" in shown(browser, "cfo")[1]  # it flashed
    assert browser.execute_script("return window.__companyd_no_reload;") == 1  # no reload


def test_pause_on_an_agent_page_pauses_it(
    browser: webdriver.Chrome, company: Company, shots: Path
) -> None:
    base = log_in(browser, company)
    browser.get(base + "/agents/lawyer")
    click(browser, "pause")
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "resume"))
    paused = _workers(company.status()["tree"])
    assert next(n for n in paused if n["id"] == "lawyer")["state"] == "paused"
    screenshot(browser, shots, "agent")
    click(browser, "resume")
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "pause"))
    resumed = _workers(company.status()["tree"])
    assert next(n for n in resumed if n["id"] == "lawyer")["state"] == "running"


def test_a_post_without_the_csrf_token_is_refused(
    browser: webdriver.Chrome, company: Company
) -> None:
    base = log_in(browser, company)
    cookie = browser.get_cookie("companyd_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    request = urllib.request.Request(
        base + "/agents/lawyer/pause",
        data=b"",
        method="POST",
        headers={"Cookie": f"companyd_session={cookie['value']}"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    refused.value.close()
    lawyer = next(n for n in _workers(company.status()["tree"]) if n["id"] == "lawyer")
    assert lawyer["state"] == "running"


def test_screenshots_of_every_page(
    browser: webdriver.Chrome, company: Company, shots: Path
) -> None:
    base = log_in(browser, company)
    for name, path in (("agents", "/agents"), ("runs", "/runs"), ("routines", "/routines"),
                       ("today", "/today"), ("spend", "/spend"), ("memory", "/memory"),
                       ("inbox", "/inbox"), ("config", "/config")):  # fmt: skip
        browser.get(base + path)
        if browser.find_elements(By.CSS_SELECTOR, "main h1"):  # pages not built yet are 404s
            screenshot(browser, shots, name)
    assert (shots / "overview-desktop.png").exists() or list(shots.glob("*.png"))


def _slugs() -> set[str]:
    return set(yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["agents"])


def _workers(tree: dict[str, Any]) -> list[dict[str, Any]]:
    out = [tree] if tree.get("kind") == "worker" else []
    for child in tree.get("children", ()):
        out += _workers(child)
    return out
