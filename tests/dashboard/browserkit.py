"""What the dashboard's browser tests share: Debian's headless Chromium through selenium, a
real ``companyd run --offline`` serving the dashboard on a free port, and screenshots at
desktop and phone width.

The test modules set ``pytestmark = NEEDS_BROWSER``: skipped, saying what to install, only
where no browser is installed (``.ci/run`` installs ``chromium`` and ``chromium-driver``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PHONE = (390, 844)

NEEDS_BROWSER = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="no browser installed: the dashboard's browser tests need Debian's chromium and "
    "chromium-driver (apt-get install -y chromium chromium-driver; .ci/run installs them)",
)


@contextmanager
def running_daemon(
    argv: list[str], log: Path, env: Mapping[str, str], serving: Callable[[], bool]
) -> Iterator[subprocess.Popen[bytes]]:
    """``companyd`` ``argv`` (a ``run``) started with its output in ``log``, yielded once
    ``serving()`` says the dashboard answers (60 s at most), stopped with SIGTERM (then
    SIGKILL after 30 s) at the end.
    """
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "companyd", *argv],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=dict(env),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not serving():
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def screenshots_dir() -> Iterator[Path]:
    """``$COMPANYD_SCREENSHOTS`` (kept), else a temporary directory (removed at the end)."""
    chosen = os.environ.get("COMPANYD_SCREENSHOTS")
    if chosen:
        path = Path(chosen)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix="companyd-shots-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def chromium(window: tuple[int, int]) -> Iterator[webdriver.Chrome]:
    """A headless Chromium with a fresh profile, ``window`` wide and high; never touching
    the network on its own (this machine's network is closed).
    """
    profile = Path(tempfile.mkdtemp(prefix="companyd-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", f"--user-data-dir={profile}", f"--window-size={window[0]},{window[1]}",
    ):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def as_new(driver: webdriver.Chrome, window: tuple[int, int]) -> webdriver.Chrome:
    """``driver`` put back the way :func:`chromium` hands a new one over: one blank tab, no
    cookies, no site storage, no HTTP cache, ``window`` wide and high.

    A module's tests share one Chromium (a start costs ~0.7 s of CPU and ~2 s) and each
    gets it as new: what one test's page left behind (a login cookie, htmx's history in
    localStorage, a second tab) cannot reach the next test.
    """
    handles = driver.window_handles
    for handle in handles[1:]:
        driver.switch_to.window(handle)
        driver.close()
    driver.switch_to.window(handles[0])
    if driver.current_url.startswith(("http://", "https://")):
        driver.execute_script("localStorage.clear(); sessionStorage.clear();")
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    driver.set_window_size(*window)
    return driver


def screenshot(browser: webdriver.Chrome, shots: Path, name: str, desktop: tuple[int, int]) -> None:
    """``<name>-desktop.png`` and ``<name>-phone.png`` in ``shots``; back to ``desktop``."""
    for label, (width, height) in (("desktop", desktop), ("phone", PHONE)):
        browser.set_window_size(width, height)
        time.sleep(0.3)  # let the layout settle at the new width (a picture, no assertion)
        browser.save_screenshot(str(shots / f"{name}-{label}.png"))
    browser.set_window_size(*desktop)
