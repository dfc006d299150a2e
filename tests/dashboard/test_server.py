"""The dashboard's web server as a supervised child of a real daemon (in process, offline
model): it serves on the configured address, leaves the daemon's signal handlers alone,
and a crash of the web layer is restarted like any child without touching the agents.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from companyd.admin import AdminError, ReloadApplied, render_status
from companyd.admin._wire import result_data
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.llm._offline import OfflineModel
from companyd.testing.daemon import short_dir

EXAMPLE = Path(__file__).resolve().parents[2] / "company.yaml"


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def example_on_port_zero(work: Path) -> Path:
    path = work / "company.yaml"
    text = EXAMPLE.read_text(encoding="utf-8") + '\ndashboard:\n  listen: "127.0.0.1:0"\n'
    path.write_text(text, encoding="utf-8")
    return path


def nodes(tree: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {tree["id"]: tree}
    for child in tree.get("children", ()):
        out.update(nodes(child))
    return out


async def wait_for(check: Any, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.anyio
async def test_a_crash_of_the_web_layer_is_restarted_and_never_touches_the_agents(
    work: Path,
) -> None:
    cfg = load_config(example_on_port_zero(work))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    async with Daemon(cfg, work / "s", backend=OfflineModel(), offline=True) as d:
        server = d.web.server
        assert server is not None
        await wait_for(lambda: server.url is not None)
        login = await d.dashboard_login()
        status, text = await asyncio.to_thread(get, login.url)
        assert status == 200 and "Logged in" in text
        assert {s: signal.getsignal(s) for s in handlers} == handlers  # uvicorn took none
        # asyncio sets TCP_NODELAY on accepted connections only of a socket made with
        # proto=IPPROTO_TCP; without it every keep-alive response waited ~40 ms for a
        # delayed ACK (found by bench/dashboard.py)
        assert server.server is not None
        (listening,) = server.server.servers[0].sockets
        assert listening.proto == socket.IPPROTO_TCP

        status_before = await d.status()
        assert status_before.daemon.dashboard == server.url  # the port bound for port 0
        before = nodes(status_before.tree)
        agents = {slug: before[slug]["started_at"] for slug in cfg.agents}
        assert before["dashboard"]["restarts"] == 0
        crashed = d.bus.subscribe(kinds={"child_exited"})
        assert server.server is not None
        server.server.should_exit = True  # the web layer stops by itself: a crash

        exit_event = await asyncio.wait_for(crashed.get(), 10)
        assert exit_event.data["child"] == "dashboard"
        assert exit_event.data["reason"].startswith("error:")
        # restarted, and up again: the count goes to 1 as the restart begins ("restarting"),
        # the old URL may still be set then — wait for the node to run again
        await wait_for(
            lambda: (
                (node := nodes(d.tree.snapshot())["dashboard"])["restarts"] == 1
                and node["state"] == "running"
            )
        )
        await wait_for(lambda: server.url is not None)
        after = nodes((await d.status()).tree)
        assert after["dashboard"]["state"] == "running"
        assert {slug: after[slug]["started_at"] for slug in cfg.agents} == agents
        assert all(after[slug]["restarts"] == 0 for slug in cfg.agents)
        again = await d.dashboard_login()
        status, _ = await asyncio.to_thread(get, again.url)
        assert status == 200  # serving again


@pytest.mark.anyio
async def test_an_address_in_use_leaves_the_daemon_running_and_says_so(work: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    path = work / "company.yaml"
    path.write_text(
        EXAMPLE.read_text(encoding="utf-8") + f'\ndashboard:\n  listen: "127.0.0.1:{port}"\n',
        encoding="utf-8",
    )
    try:
        async with Daemon(load_config(path), work / "s", backend=OfflineModel(), offline=True) as d:
            assert nodes(d.tree.snapshot())["dashboard"]["state"] == "running"
            with pytest.raises(AdminError, match=rf"127.0.0.1:{port}.*dashboard.listen"):
                await d.dashboard_login()
            # the record is true (issue 28): status does not call it running while it
            # serves nothing, and says why — in --json and as text
            status = await d.status()
            node = nodes(status.tree)["dashboard"]
            assert node["state"] == "not serving" and node["serving"] is False
            assert f"cannot serve the dashboard on 127.0.0.1:{port}" in node["reason"]
            line = next(
                ln
                for ln in render_status(result_data("status", status)).splitlines()
                if "dashboard" in ln
            )
            assert "not serving" in line and "why: cannot serve the dashboard on" in line
    finally:
        taken.close()


@pytest.mark.anyio
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
async def test_with_tls_the_daemon_serves_https_and_the_cookie_is_secure(work: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(work / "d.key"), "-out", str(work / "d.crt")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    path = work / "company.yaml"  # relative certificate paths resolve next to company.yaml
    path.write_text(
        EXAMPLE.read_text(encoding="utf-8")
        + '\ndashboard: {listen: "127.0.0.1:0", tls_cert: d.crt, tls_key: d.key}\n',
        encoding="utf-8",
    )
    async with Daemon(load_config(path), work / "s", backend=OfflineModel(), offline=True) as d:
        server = d.web.server
        assert server is not None
        await wait_for(lambda: server.url is not None)
        login = await d.dashboard_login()
        assert login.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(work / "d.crt"))

        def fetch() -> tuple[int, str]:
            with urllib.request.urlopen(login.url, timeout=10, context=context) as r:
                return r.status, r.headers.get("set-cookie", "")

        status, cookie = await asyncio.to_thread(fetch)
        assert status == 200 and "Secure" in cookie and "HttpOnly" in cookie


@pytest.mark.anyio
async def test_a_web_layer_restarted_after_a_reload_serves_as_it_started(work: Path) -> None:
    """``dashboard:`` waits for the daemon's restart (a reload lists it in
    ``restart_required``): the server keeps the address and TLS it started with, and so does
    a restart of the web layer alone — a reload that added ``behind_proxy`` must not make
    the session cookie ``Secure`` on the plain HTTP still served, or no one can log in.
    """
    path = example_on_port_zero(work)
    async with Daemon(load_config(path), work / "s", backend=OfflineModel(), offline=True) as d:
        server = d.web.server
        assert server is not None
        await wait_for(lambda: server.url is not None)
        first = await d.dashboard_login()
        assert (await asyncio.to_thread(get, first.url))[0] == 200  # the stack starts
        path.write_text(
            path.read_text(encoding="utf-8") + "  behind_proxy: true\n", encoding="utf-8"
        )
        reloaded = await d.reload()
        assert isinstance(reloaded, ReloadApplied)
        assert reloaded.restart_required == ["dashboard"]
        assert server.server is not None
        server.server.should_exit = True  # the web layer stops by itself: a crash
        await wait_for(lambda: nodes(d.tree.snapshot())["dashboard"]["restarts"] == 1)
        await wait_for(lambda: server.url is not None)
        login = await d.dashboard_login()
        assert login.url.startswith("http://127.0.0.1:")

        def fetch() -> tuple[int, str]:
            with urllib.request.urlopen(login.url, timeout=10) as r:
                return r.status, r.headers.get("set-cookie", "")

        status, cookie = await asyncio.to_thread(fetch)
        assert status == 200 and "HttpOnly" in cookie
        assert "Secure" not in cookie, cookie


@pytest.mark.anyio
async def test_the_web_stack_starts_at_the_first_visit_and_a_failed_build_is_tried_again() -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from companyd.dashboard import DashboardServer
    from companyd.supervision import StandaloneContext

    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    builds: list[int] = []

    def build() -> Starlette:
        builds.append(len(builds) + 1)
        if len(builds) == 1:
            raise RuntimeError("the first build fails")
        app = Starlette(routes=[Route("/", hello)])
        app.state.stopping = asyncio.Event()
        return app

    server = DashboardServer(build, "127.0.0.1", 0)

    # read afresh each time (mypy would keep the type an assert narrowed)
    def uvicorn_server() -> Any:
        return server.server

    def url() -> str | None:
        return server.url

    ctx = StandaloneContext("companyd/dashboard")
    task = asyncio.create_task(server.run(ctx))
    try:
        await asyncio.wait_for(ctx.ready.wait(), 10)
        # started as soon as it listens: its URL reported, uvicorn not started, nothing built
        assert server.url is not None and ctx.info == {"url": server.url}
        assert uvicorn_server() is None and builds == []
        status, _ = await asyncio.to_thread(get, server.url + "/")
        assert status == 500 and builds == [1]  # the build raised: that request fails
        assert uvicorn_server() is not None and uvicorn_server().started
        answers = await asyncio.gather(
            *(asyncio.to_thread(get, server.url + "/") for _ in range(3))
        )
        assert answers == [(200, "hello")] * 3 and builds == [1, 2]  # built again, once
    finally:
        ctx.stopping.set()
        await asyncio.wait_for(task, 15)
    assert url() is None and uvicorn_server() is None
