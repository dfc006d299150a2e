"""Issue 32 point 4: the dashboard holds under a connection flood.

A real daemon (a subprocess, offline model) with systemd's default soft ``LimitNOFILE``
(1,024) gets 1,100 idle TCP connections to its dashboard — half from 127.0.0.1, half spread
over twenty other loopback addresses (under the per-address cap each, so the total cap is
what holds them). Its descriptors stay far below the limit, ``companyd status`` answers, a
browser still logs in, and the log says so in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from companyd.dashboard._connections import MAX_CONNECTIONS
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import DaemonProcess

pytestmark = pytest.mark.anyio

COMPANY = {
    "schema": "companyd/v1",
    "company": {"name": "Flood Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
    "departments": {"finance": {"title": "Finance"}},
    "agents": {"ceo": {"title": "CEO", "instructions": "You are the CEO."}},
    "dashboard": {"listen": "127.0.0.1:0"},
}
FLOOD = 1100
SOFT_LIMIT = 1024  # systemd's default LimitNOFILE= soft limit


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def connect_idle(port: int, source: str) -> socket.socket:
    """A connection that is started and then never sends anything."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.bind((source, 0))
    s.connect_ex(("127.0.0.1", port))  # EINPROGRESS: the kernel completes it
    return s


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
async def test_a_flood_of_idle_connections_leaves_the_daemon_answering(work: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FLOOD + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, FLOOD + 400), hard))
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(COMPANY, sort_keys=False), encoding="utf-8")
    daemon = DaemonProcess(cfg, work / "s", log=work / "daemon.log", log_level="info")
    flood: list[socket.socket] = []
    async with daemon:
        _, d_hard = resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (SOFT_LIMIT, d_hard))
        status = await daemon.call("status")
        url = status["daemon"]["dashboard"]
        assert url, status
        port = int(url.rsplit(":", 1)[1])
        try:
            sources = ["127.0.0.1"] * (FLOOD // 2) + [
                f"127.0.0.{2 + i % 20}" for i in range(FLOOD - FLOOD // 2)
            ]
            most = 0
            for n, source in enumerate(sources):
                flood.append(connect_idle(port, source))
                if n % 50 == 0:
                    most = max(most, open_fds(daemon.pid))
                    await asyncio.sleep(0.01)
            # Until the daemon has accepted the whole flood: holding at most MAX_CONNECTIONS,
            # it has then closed at least the rest (the kernel's handshakes, its accepts).
            deadline = time.monotonic() + 30.0
            while sum(map(closed_now, flood)) < FLOOD - MAX_CONNECTIONS:
                assert time.monotonic() < deadline, "the daemon did not take the flood in 30 s"
                most = max(most, open_fds(daemon.pid))
                await asyncio.sleep(0.05)
            most = max(most, open_fds(daemon.pid))
            # the gate holds the dashboard's share far below the limit
            assert most < MAX_CONNECTIONS + 200 < SOFT_LIMIT, most

            result = await daemon.cli("status", timeout=20)
            assert result.rc == 0, result.err
            login = await daemon.call("dashboard_login")
            page = await asyncio.to_thread(
                lambda: urllib.request.urlopen(login["url"], timeout=10).status
            )
            assert page == 200  # a browser still gets in: an idle connection made room
        finally:
            for s in flood:
                s.close()
    lines = [ln for ln in daemon.log_text().splitlines() if "connections at once" in ln]
    assert len(lines) == 1, lines
    assert "(a cap)" in lines[0] and "logged at most once a minute" in lines[0]
    assert "Too many open files" not in daemon.log_text()


def closed_now(s: socket.socket) -> bool:
    """Whether the server has closed the non-blocking ``s`` (EOF or reset) by now."""
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def closed_by_peer(s: socket.socket, within: float) -> bool:
    """Whether the server closes ``s`` (EOF or reset) within ``within`` seconds."""
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_a_connection_without_a_request_is_closed_and_an_idle_one_makes_room(
    work: Path,
) -> None:
    from companyd.config import load_config
    from companyd.daemon._main import Daemon
    from companyd.llm._offline import OfflineModel

    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(COMPANY, sort_keys=False), encoding="utf-8")
    async with Daemon(load_config(cfg), work / "s", backend=OfflineModel(), offline=True) as d:
        server = d.web.server
        assert server is not None
        async with asyncio.timeout(20):
            while server.url is None:
                await asyncio.sleep(0.02)
        port = int(server.url.rsplit(":", 1)[1])
        gate = server.gate
        gate.head_timeout = 0.2  # read by each new connection
        silent = socket.create_connection(("127.0.0.1", port), timeout=5)
        with contextlib.closing(silent):
            assert await asyncio.to_thread(closed_by_peer, silent, 5.0)  # no request head
        gate.head_timeout = 30.0
        gate.max_per_address = 2
        first = socket.create_connection(("127.0.0.1", port), timeout=5)
        second = socket.create_connection(("127.0.0.1", port), timeout=5)
        with contextlib.closing(first), contextlib.closing(second):
            await asyncio.sleep(0.2)
            login = await d.dashboard_login()  # a third from the same address: room is made
            page = await asyncio.to_thread(
                lambda: urllib.request.urlopen(login.url, timeout=10).status
            )
            assert page == 200
            assert await asyncio.to_thread(closed_by_peer, first, 5.0)  # the oldest idle one
            assert gate.evicted >= 1
