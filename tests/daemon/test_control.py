"""The control socket (server, clients, discovery) and the CLI commands built on it.

Everything runs over real Unix sockets; the CLI commands run by the CLI's entry point in a
thread (its own event loop and control client, working directory ``/``) against a server
in the test's event loop: the same parsing, client, rendering and exit codes as ``python -m
companyd``, without an interpreter's start-up each (the exit status a shell gets from a
process is tests/test_cli_conventions.py's). The Admin behind the server is a small
in-memory company.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companyd.admin import AdminError, render_status, status_line
from companyd.clock import ManualClock
from companyd.daemon._control import MAX_BUFFERED_BYTES, MAX_CONNECTIONS, ControlServer
from companyd.daemon._control_client import (
    ControlClient,
    candidate_sockets,
    connect_unix,
    find_daemon,
)
from companyd.daemon._protocol import (
    ADMIN_OPS,
    ControlError,
    ControlTimeout,
    RequestFailed,
    socket_path,
)
from companyd.errors import CompanydError, DaemonNotRunning
from companyd.testing.daemon import Ctx, as_unprivileged, running, short_dir
from companyd.testing.daemon_process import CliResult
from companyd.testing.inprocess import cli_in_thread

NOW = 1_800_000_000.0

STATUS: dict[str, Any] = {
    "now": NOW,
    "daemon": {
        "pid": 4242,
        "version": "0.1.0",
        "state": "running",
        "started_at": NOW - 7380,
        "uptime_s": 7380.0,
        "config": "/etc/companyd/company.yaml",
        "state_dir": "/var/lib/companyd",
        "offline": True,
        "loop_lag": {"current_ms": 1.2, "max_ms": 48.0},
    },
    "company": {"name": "Northwind Solo", "timezone": "UTC"},
    "agents": {"total": 3, "running": 2, "paused": 1, "failed": 0},
    "tree": {
        "id": "companyd",
        "kind": "supervisor",
        "state": "running",
        "restarts": 0,
        "uptime_s": 7380.0,
        "children": [
            {"id": "memory", "kind": "worker", "state": "running", "restarts": 0, "uptime_s": 7380},
            {
                "id": "agents",
                "kind": "supervisor",
                "state": "running",
                "restarts": 1,
                "uptime_s": 7380,
                "children": [
                    {"id": "ceo", "kind": "worker", "state": "running", "restarts": 0},
                    {
                        "id": "finance",
                        "kind": "supervisor",
                        "state": "running",
                        "restarts": 2,
                        "uptime_s": 724,
                        "children": [
                            {
                                "id": "cfo",
                                "kind": "worker",
                                "state": "paused",
                                "pause_reason": "operator",
                                "restarts": 0,
                                "uptime_s": 724,
                            },
                            {
                                "id": "accountant",
                                "kind": "worker",
                                "state": "restarting",
                                "restarts": 3,
                                "last_exit": "error:RuntimeError('boom')",
                            },
                        ],
                    },
                ],
            },
        ],
    },
    "runs_in_flight": [
        {
            "run_id": "run-3f9c2a1b7d4e",
            "agent": "ceo",
            "routine": "weekly-priorities",
            "started_at": NOW - 72,
            "cost_usd": 0.02,
        }
    ],
    "spend": {
        "currency": "USD",
        "today": {"used_usd": 1.23, "reserved_usd": 0.1, "limit_usd": 10.0},
        "month": {"used_usd": 12.34, "limit_usd": 200.0},
        "agents": [
            {"agent": "ceo", "today_usd": 0.9, "daily_limit_usd": 3.0},
            {"agent": "cfo", "today_usd": 0.0, "daily_limit_usd": 2.0, "paused": True},
        ],
    },
    "routines": [
        {"routine": "month-close", "agent": "cfo", "next_fire": NOW + 86400 * 3},
        {
            "routine": "weekly-priorities",
            "agent": "ceo",
            "next_fire": NOW + 3 * 3600 + 12 * 60,
            "last_outcome": "ok",
        },
    ],
    "alerts": {"telegram": "degraded", "queued": 2},
}


class Company:
    """An in-memory Admin: three agents, pause/resume, a budget, a reload.

    It answers plain dicts of its own shapes, not the daemon's result dataclasses: the
    control socket passes plain JSON data through as it is, and the CLI's printers are
    total over any shape (a daemon of another version).
    """

    def __init__(self) -> None:
        self.paused: set[str] = set()
        self.agents = ["ceo", "cfo", "accountant"]
        self.raised: list[tuple[str | None, float]] = []
        self.slow_started = asyncio.Event()
        self.slow_release = asyncio.Event()
        self.slow_cancelled = False
        self.reload_result: dict[str, Any] = {"applied": True, "added": ["cto"], "unchanged": 3}

    def _agent(self, agent: str) -> str:
        if agent not in self.agents:
            raise AdminError(f"unknown agent {agent!r}; agents: {', '.join(self.agents)}")
        return agent

    async def status(self) -> Any:
        return STATUS

    async def pause(self, agent: str, via: str = "cli") -> Any:
        self.paused.add(self._agent(agent))
        return {"agent": agent, "paused": True}

    async def resume(self, agent: str, via: str = "cli") -> Any:
        self.paused.discard(self._agent(agent))
        return {"agent": agent, "paused": False}

    async def reload(self, via: str = "cli") -> Any:
        return self.reload_result

    async def tools(self, agent: str | None = None) -> Any:
        return {"day": "2026-01-01", "tools": []}

    async def tools_approve(self, server: str, agent: str | None = None, via: str = "cli") -> Any:
        return {"server": server, "approved": []}

    async def backup(self, to: str) -> Any:
        return {"path": to}

    async def dashboard_login(self) -> Any:
        return {"url": "http://127.0.0.1:8470/login?token=t", "expires_at": 0.0}

    async def raise_budget(self, agent: str | None, usd: float, via: str = "cli") -> Any:
        if agent is not None:
            self._agent(agent)
        self.raised.append((agent, usd))
        return {"agent": agent, "raised_by_usd": usd, "daily_limit_usd": 10.0 + usd}

    async def jobs(self) -> Any:
        raise RuntimeError("scheduler exploded")  # a bug, not a refusal

    async def budget(self) -> Any:
        raise CompanydError("the ledger is unavailable; see `journalctl -u companyd`")

    async def spend(self, by: str = "agent", period: str = "today", per_day: bool = False) -> Any:
        return {"by": by, "period": period, "when": NOW}

    async def ask(
        self,
        agent: str,
        question: str,
        timeout: float = 300.0,
        reply_to: str | None = None,
        task_id: str | None = None,
        via: str = "cli",
    ) -> Any:
        self.slow_started.set()
        try:
            await self.slow_release.wait()
        except asyncio.CancelledError:
            self.slow_cancelled = True
            raise
        return {"answer": f"{agent}: {question}"}

    # The rest of the Admin protocol: no test here asks for these.
    def _absent(self, op: str) -> AdminError:
        return AdminError(f"{op!r} is not implemented by this test company")

    async def job_history(self, routine: str, limit: int = 20) -> Any:
        raise self._absent("job_history")

    async def run_job(self, routine: str, via: str = "cli") -> Any:
        raise self._absent("run_job")

    async def resume_all(self, via: str = "cli") -> Any:
        raise self._absent("resume_all")

    async def resume_job(self, routine: str, via: str = "cli") -> Any:
        raise self._absent("resume_job")

    async def fire_webhook(self, routine: str, webhook_id: str, body: str) -> Any:
        raise self._absent("fire_webhook")

    async def runs(
        self,
        agent: str | None = None,
        status: str | None = None,
        limit: int = 20,
        routine: str | None = None,
        since: float | None = None,
        finished: bool = False,
        deliveries: bool = False,
    ) -> Any:
        raise self._absent("runs")

    async def run_show(self, run_id: str) -> Any:
        raise self._absent("run_show")

    async def tasks(self, quarantined: bool = False) -> Any:
        raise self._absent("tasks")

    async def retry(self, task_id: str, via: str = "cli") -> Any:
        raise self._absent("retry")

    async def proposals(self) -> Any:
        raise self._absent("proposals")

    async def approve(self, proposal_id: str, by: str = "", via: str = "cli") -> Any:
        raise self._absent("approve")

    async def reject(
        self, proposal_id: str, reason: str = "", by: str = "", via: str = "cli"
    ) -> Any:
        raise self._absent("reject")

    async def answer(self, item_id: str, text: str, by: str = "", via: str = "cli") -> Any:
        raise self._absent("answer")

    async def inbox(self) -> Any:
        raise self._absent("inbox")

    async def revert(self, proposal_id: str, via: str = "cli") -> Any:
        raise self._absent("revert")

    async def debug(self, action: str, target: str | None = None, seconds: float = 0.0) -> Any:
        raise self._absent("debug")

    async def memory_search(self, query: str, limit: int = 50) -> Any:
        raise self._absent("memory_search")

    async def memory_entity(self, name: str, depth: int = 1) -> Any:
        raise self._absent("memory_entity")

    async def memory_changes(self, limit: int = 50) -> Any:
        raise self._absent("memory_changes")

    async def config_view(self) -> Any:
        raise self._absent("config_view")


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with short_dir() as d:
        yield d


@pytest.fixture
async def server(sock_dir: Path) -> AsyncIterator[tuple[ControlServer, Company]]:
    company = Company()
    srv = ControlServer(company, sock_dir / "companyd.sock", state_dir=sock_dir)
    async with running(srv.run, Ctx(path="companyd/control")):
        yield srv, company


async def _raw(path: Path, *lines: bytes, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Send raw request lines on one connection and read one answer per line, all within
    ``timeout`` seconds.
    """
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_unix_connection(path)
        try:
            out = []
            for line in lines:
                writer.write(line)
                await writer.drain()
                out.append(json.loads(await reader.readline()))
            return out
        finally:
            writer.close()
            await writer.wait_closed()


# ---------------------------------------------------------------------------------------
# server and clients


@pytest.mark.anyio
async def test_sync_and_async_clients_get_the_result(server: tuple[ControlServer, Company]) -> None:
    srv, company = server
    client = ControlClient(srv.path)
    assert await asyncio.to_thread(client.call, "status") == json.loads(json.dumps(STATUS))
    assert await client.acall("pause", agent="cfo") == {"agent": "cfo", "paused": True}
    assert company.paused == {"cfo"}
    ping = await asyncio.to_thread(client.ping)
    assert ping["pid"] == os.getpid() and ping["state_dir"] == str(srv.state_dir)
    assert set(ping["ops"]) == ADMIN_OPS | {"ping"}


@pytest.mark.anyio
async def test_many_requests_on_one_connection_with_ids(
    server: tuple[ControlServer, Company],
) -> None:
    srv, _ = server
    answers = await _raw(
        srv.path,
        b'{"op": "resume", "args": {"agent": "ceo"}, "id": 1}\n',
        b'{"op": "spend", "args": {"period": "month"}, "id": "two"}\n',
        b'{"op": "raise_budget", "args": {"agent": null, "usd": 5}}\n',
    )
    assert answers[0] == {"ok": True, "result": {"agent": "ceo", "paused": False}, "id": 1}
    assert answers[1]["result"]["period"] == "month" and answers[1]["id"] == "two"
    assert answers[2]["result"]["raised_by_usd"] == 5.0  # int converted to float


@pytest.mark.anyio
async def test_an_admin_error_is_the_answer_and_the_server_keeps_serving(
    server: tuple[ControlServer, Company],
) -> None:
    srv, _ = server
    client = ControlClient(srv.path)
    with pytest.raises(RequestFailed) as info:
        await client.acall("pause", agent="cfoo")
    assert str(info.value) == "unknown agent 'cfoo'; agents: ceo, cfo, accountant"
    assert info.value.code == "admin" and isinstance(info.value, AdminError)
    with pytest.raises(RequestFailed, match="the ledger is unavailable") as info:
        await client.acall("budget")  # a deliberate CompanydError: shown as it is
    assert info.value.code == "admin"
    assert (await client.acall("resume", agent="cfo"))["paused"] is False


@pytest.mark.anyio
async def test_an_unexpected_exception_is_an_internal_error_logged_with_its_traceback(
    server: tuple[ControlServer, Company], caplog: pytest.LogCaptureFixture
) -> None:
    srv, _ = server
    client = ControlClient(srv.path)
    with (
        caplog.at_level(logging.ERROR, logger="companyd.daemon.control"),
        pytest.raises(RequestFailed) as info,
    ):
        await client.acall("jobs")
    assert str(info.value).startswith("internal error: RuntimeError: scheduler exploded")
    assert info.value.code == "internal"
    record = next(r for r in caplog.records if "'jobs' failed" in r.getMessage())
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    assert (await client.acall("pause", agent="ceo"))["paused"] is True  # still serving
    assert srv.failures == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json\n", "request is not valid JSON"),
        (b"[1, 2]\n", "request must be a JSON object"),
        (b'{"op": "launch"}\n', "unknown op 'launch'; valid ops: answer, approve, ask, backup"),
        (b'{"op": "pause", "args": []}\n', "'args' of 'pause' must be a JSON object"),
        (b'{"op": "pause", "args": {}}\n', "missing a required argument: 'agent'"),
        (
            b'{"op": "pause", "args": {"agent": 7}}\n',
            "bad argument agent=7 for 'pause': expected a string",
        ),
        (
            b'{"op": "pause", "args": {"agent": "cfo", "now": 1}}\n',
            "unexpected keyword argument 'now'",
        ),
        (b'{"op": "raise_budget", "args": {"agent": "cfo", "usd": "lots"}}\n', "expected a number"),
        (b'{"op": "raise_budget", "args": {"agent": "cfo", "usd": true}}\n', "expected a number"),
        # issue 15 item 13: the malformed requests an attack run sent
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", "request is not valid JSON (nested deeper"),
        (b'{"op": "pause", "args": {"agent": [' * 20_000 + b"\n", "request is not valid JSON"),
        (b'{"op": "pause", "args": {"agent": "\xff\xfe"}}\n', "request is not valid UTF-8"),
        (b'{"op": "ping", "id": ' + b"9" * 5000 + b"}\n", "request is not valid JSON"),
        (b'{"op": "pause", "args": {"agent": "\\ud800"}}\n', "unpaired surrogate"),
        (b'"status"\n', "request must be a JSON object"),
        (b"null\n", "request must be a JSON object"),
        (b'{"op": ["status"]}\n', "unknown op ['status']"),
        (b'{"op": "pause", "args": {"agent": {"a": 1}}}\n', "expected a string"),
        (b'{"op": "raise_budget", "args": {"agent": "cfo", "usd": NaN}}\n', "a finite number"),
        (b'{"op": "raise_budget", "args": {"agent": "cfo", "usd": 1e999}}\n', "a finite number"),
        (b'{"op": "raise_budget", "args": {"agent": "cfo", "usd": -Infinity}}\n', "finite"),
        (b'{"op": "pause", "args": {"agent": "cfo", "self": 1}}\n', "bad arguments for 'pause'"),
    ],
)
async def test_bad_requests_are_answered_and_the_connection_stays_usable(
    server: tuple[ControlServer, Company], line: bytes, message: str
) -> None:
    srv, company = server
    bad, good = await _raw(srv.path, line, b'{"op": "pause", "args": {"agent": "ceo"}}\n')
    assert bad["ok"] is False and bad["code"] == "bad_request"
    assert message in bad["error"]
    assert good["ok"] is True and company.paused == {"ceo"}


@pytest.mark.anyio
async def test_an_oversized_request_is_refused_and_the_connection_stays_usable(
    sock_dir: Path,
) -> None:
    # Until issue 15 an over-long line closed the connection; now it is one more
    # bad_request, its bytes are skipped (never buffered) up to the newline.
    srv = ControlServer(Company(), sock_dir / "c.sock", max_request_bytes=1024)
    async with running(srv.run):
        long = b'{"op": "status", "args": {"pad": "' + b"x" * 500_000 + b'"}}\n'
        bad, good = await _raw(srv.path, long, b'{"op": "pause", "args": {"agent": "ceo"}}\n')
        assert bad["code"] == "bad_request" and "longer than 1024 bytes" in bad["error"]
        assert good == {"ok": True, "result": {"agent": "ceo", "paused": True}}
        assert srv.buffered_bytes == 0


async def _connect(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(10):
        return await asyncio.open_unix_connection(path)


async def _until(predicate: Any, what: str) -> None:
    async with asyncio.timeout(10):
        while not predicate():
            await asyncio.sleep(0.01)


@pytest.mark.anyio
async def test_a_last_request_without_a_newline_is_answered_at_eof(
    server: tuple[ControlServer, Company],
) -> None:
    srv, company = server
    reader, writer = await _connect(srv.path)
    writer.write(b'{"op": "pause", "args": {"agent": "cfo"}}')  # `echo -n … | nc -U`
    writer.write_eof()
    async with asyncio.timeout(10):
        answer = json.loads(await reader.readline())
        assert await reader.read() == b""
    writer.close()
    assert answer["ok"] is True and company.paused == {"cfo"}


@pytest.mark.anyio
async def test_over_the_connection_cap_the_oldest_idle_client_makes_room(sock_dir: Path) -> None:
    srv = ControlServer(Company(), sock_dir / "c.sock", max_connections=3)
    async with running(srv.run):
        idle = [await _connect(srv.path) for _ in range(3)]
        await _until(lambda: srv.connections == 3, "three connections")
        # The CLI still gets through: the oldest idle connection is told and closed.
        client = ControlClient(srv.path)
        assert (await asyncio.to_thread(client.ping))["pid"] == os.getpid()
        async with asyncio.timeout(10):
            notice = json.loads(await idle[0][0].readline())
            assert await idle[0][0].read() == b""
        assert notice["ok"] is False and notice["code"] == "busy"
        assert "at most 3 connections" in notice["error"]
        assert srv.connections <= 3
        for _, w in idle:
            w.close()


@pytest.mark.anyio
async def test_when_every_connection_is_running_an_operation_a_new_client_is_told_busy(
    sock_dir: Path,
) -> None:
    company = Company()
    srv = ControlServer(company, sock_dir / "c.sock", max_connections=2)
    async with running(srv.run):
        ask = b'{"op": "ask", "args": {"agent": "cfo", "question": "q"}}\n'
        asks = [asyncio.ensure_future(_raw(srv.path, ask)) for _ in range(2)]
        await _until(lambda: srv.busy_connections == 2, "two running asks")
        with pytest.raises(RequestFailed, match="busy: the control socket serves at most 2") as e:
            await ControlClient(srv.path).acall("status")
        assert e.value.code == "busy"
        company.slow_release.set()
        async with asyncio.timeout(10):
            for a in asks:
                assert (await a)[0]["ok"] is True
        assert (await ControlClient(srv.path).acall("pause", agent="cfo"))["paused"] is True


@pytest.mark.anyio
async def test_the_attack_run_with_default_limits_1100_idle_and_400_hoarding_clients(
    sock_dir: Path,
) -> None:
    srv = ControlServer(Company(), sock_dir / "c.sock")
    async with running(srv.run):
        idle = await asyncio.to_thread(_open_idle, srv.path, 1100)
        assert len(idle) == 1100
        await _until(lambda: srv.refused >= 1100 - MAX_CONNECTIONS, "the cap enforced")
        assert (await asyncio.to_thread(_ping_raw, srv.path))["result"]["pid"] == os.getpid()
        for s in idle:
            s.close()
        hoarders = await asyncio.to_thread(_open_idle, srv.path, 400)
        part = b'{"op": "status", "id": "' + b"x" * 100_000
        for s in hoarders:
            with contextlib.suppress(OSError):
                s.send(part)  # up to 100 KB each, 40 MB in all; never finished
        await _until(lambda: srv.refused >= 1100 - MAX_CONNECTIONS + 400 - MAX_CONNECTIONS, "cap")
        assert srv.connections <= MAX_CONNECTIONS
        assert srv.buffered_bytes <= MAX_BUFFERED_BYTES
        assert (await asyncio.to_thread(_ping_raw, srv.path))["result"]["pid"] == os.getpid()
        for s in hoarders:
            s.close()


@pytest.mark.anyio
async def test_clients_that_never_read_their_answers_do_not_lock_the_cli_out(
    sock_dir: Path,
) -> None:
    # Answers waiting on a client that does not read are not operations running: such a
    # connection is as idle as one that sends nothing.
    srv = ControlServer(Company(), sock_dir / "c.sock", max_connections=2)
    async with running(srv.run):
        hogs = [await _connect(srv.path) for _ in range(2)]
        for _, w in hogs:
            w.write(b'{"op": "status", "args": {}}\n' * 2000)
        # Stuck for good: both wait on a full socket buffer and no request is served.
        async with asyncio.timeout(10):
            steady = 0
            while steady < 20:
                before = srv.requests
                await asyncio.sleep(0.01)
                stuck = srv.writing_connections == 2 and srv.requests == before
                steady = steady + 1 if stuck else 0
        (answer,) = await _raw(srv.path, b'{"op": "pause", "args": {"agent": "ceo"}}\n')
        assert answer["ok"] is True, answer
        for _, w in hogs:
            w.transport.abort()


@pytest.mark.anyio
async def test_bytes_buffered_over_all_connections_are_capped_the_biggest_buffer_goes(
    sock_dir: Path,
) -> None:
    srv = ControlServer(
        Company(),
        sock_dir / "c.sock",
        max_request_bytes=4096,
        max_buffered_bytes=6000,
    )
    async with running(srv.run):
        a_r, a_w = await _connect(srv.path)
        b_r, b_w = await _connect(srv.path)
        a_w.write(b'{"op": "status", "id": "' + b"a" * 3000)
        b_w.write(b'{"op": "status", "id": "' + b"b" * 2500)
        await a_w.drain()
        await b_w.drain()
        await _until(lambda: srv.buffered_bytes > 5500, "both partial lines buffered")
        # A third client's request does not fit: the biggest buffer (a's) is dropped.
        (answer,) = await _raw(
            srv.path, b'{"op": "pause", "args": {"agent": "ceo"}, "id": "' + b"c" * 800 + b'"}\n'
        )
        assert answer["ok"] is True
        async with asyncio.timeout(10):
            notice = json.loads(await a_r.readline())
            assert await a_r.read() == b""
        assert notice["code"] == "busy" and "buffered the most" in notice["error"], notice
        assert srv.buffered_bytes <= 6000
        b_w.write(b'"}\n')  # b finishes its request and is served
        async with asyncio.timeout(10):
            assert json.loads(await b_r.readline())["ok"] is True
        for w in (a_w, b_w):
            w.close()


@pytest.mark.anyio
async def test_an_idle_or_trickling_connection_times_out(sock_dir: Path) -> None:
    clock = ManualClock()
    srv = ControlServer(Company(), sock_dir / "c.sock", clock=clock, idle_timeout=60)
    async with running(srv.run):
        idle_r, idle_w = await _connect(srv.path)
        slow_r, slow_w = await _connect(srv.path)
        await _until(lambda: srv.connections == 2 and clock.sleepers >= 2, "two readers")
        slow_w.write(b'{"op": ')
        await slow_w.drain()
        await _until(lambda: srv.buffered_bytes == 7, "the first bytes")
        clock.advance(30)
        slow_w.write(b'"status", ')  # a byte now and then does not extend the deadline
        await slow_w.drain()
        await _until(lambda: srv.buffered_bytes == 17, "more bytes")
        clock.advance(30)
        async with asyncio.timeout(10):
            assert await idle_r.read() == b""
            assert await slow_r.read() == b""
        await _until(lambda: srv.connections == 0, "both closed")
        for w in (idle_w, slow_w):
            w.close()


@pytest.mark.anyio
async def test_an_operation_past_its_deadline_is_cancelled_and_answered(sock_dir: Path) -> None:
    clock = ManualClock()
    company = Company()
    srv = ControlServer(company, sock_dir / "c.sock", clock=clock, request_timeout=5)
    async with running(srv.run):
        pending = asyncio.ensure_future(
            _raw(
                srv.path,
                b'{"op": "ask", "args": {"agent": "cfo", "question": "q", "timeout": 20}}\n',
            )
        )
        async with asyncio.timeout(10):
            await company.slow_started.wait()
            clock.advance(29)  # ask's deadline is its timeout + 10 s = 30 s
            await asyncio.sleep(0.05)
            assert not pending.done() and not company.slow_cancelled
            clock.advance(1)
            (answer,) = await pending
    assert answer["code"] == "timeout"
    assert "'ask' did not finish within 30 s and was cancelled" in answer["error"]
    assert company.slow_cancelled


@pytest.mark.anyio
async def test_stopping_lets_a_running_operation_finish_then_removes_the_socket(
    sock_dir: Path,
) -> None:
    clock = ManualClock()
    company = Company()
    srv = ControlServer(company, sock_dir / "c.sock", clock=clock)
    ctx = Ctx()
    task = asyncio.ensure_future(srv.run(ctx))
    async with asyncio.timeout(10):
        await ctx.ready.wait()
        idle_reader, idle_writer = await asyncio.open_unix_connection(srv.path)
        pending = asyncio.ensure_future(
            _raw(srv.path, b'{"op": "ask", "args": {"agent": "cfo", "question": "q"}}\n')
        )
        await company.slow_started.wait()
        ctx.stopping.set()
        await asyncio.sleep(0.05)
        assert await idle_reader.read() == b""  # idle connections are closed at once
        idle_writer.close()
        with pytest.raises(DaemonNotRunning):  # and no new ones are accepted
            await ControlClient(srv.path).acall("status")
        company.slow_release.set()  # the running operation finishes within drain_timeout
        (answer,) = await pending
        await task
    assert answer == {"ok": True, "result": {"answer": "cfo: q"}}
    assert not srv.path.exists()


@pytest.mark.anyio
async def test_socket_mode_is_0600_or_0660_for_a_group(sock_dir: Path) -> None:
    srv = ControlServer(Company(), sock_dir / "a.sock")
    async with running(srv.run):
        assert stat.S_IMODE(os.stat(srv.path).st_mode) == 0o600
    gid = os.getgid()
    srv = ControlServer(Company(), sock_dir / "b.sock", group=gid)
    async with running(srv.run):
        st_ = os.stat(srv.path)
        assert stat.S_IMODE(st_.st_mode) == 0o660 and st_.st_gid == gid
    with pytest.raises(CompanydError, match=r"unknown group 'no-such-group-xyz'.*groupadd"):
        ControlServer(Company(), sock_dir / "c.sock", group="no-such-group-xyz").bind()


_KILLED_DAEMON = textwrap.dedent(
    """
    import asyncio, sys
    from companyd.daemon._control import ControlServer

    class Admin:
        async def status(self):
            return {"who": "first"}

    class Ctx:
        id = path = "companyd/control"
        def __init__(self):
            self.stopping = asyncio.Event()
        def started(self, info=None):
            print("listening", flush=True)

    asyncio.run(ControlServer(Admin(), sys.argv[1]).run(Ctx()))
    """
)


@pytest.mark.anyio
async def test_the_socket_of_a_killed_daemon_is_replaced(sock_dir: Path) -> None:
    path = sock_dir / "companyd.sock"
    with subprocess.Popen(
        [sys.executable, "-c", _KILLED_DAEMON, str(path)], stdout=subprocess.PIPE, text=True
    ) as first:
        try:
            assert first.stdout is not None
            assert await asyncio.to_thread(first.stdout.readline) == "listening\n"
            assert (await ControlClient(path).acall("status")) == {"who": "first"}
            # A live daemon is never displaced.
            with pytest.raises(CompanydError, match="another process is already listening"):
                ControlServer(Company(), path).bind()
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
    assert stat.S_ISSOCK(os.lstat(path).st_mode)  # left behind by SIGKILL
    with pytest.raises(DaemonNotRunning, match="stale socket"):
        await ControlClient(path).acall("status")
    srv = ControlServer(Company(), path)
    async with running(srv.run):
        assert (await ControlClient(path).acall("pause", agent="cfo"))["paused"] is True


_FD_STARVED_DAEMON = textwrap.dedent(
    """
    import asyncio, logging, resource, sys
    from companyd.daemon._control import ControlServer

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    class Ctx:
        id = path = "companyd/control"
        def __init__(self):
            self.stopping = asyncio.Event()
        def started(self, info=None):
            print("listening", flush=True)

    # A connection cap above the file limit: the process runs out of descriptors first.
    asyncio.run(ControlServer(object(), sys.argv[1], max_connections=10_000).run(Ctx()))
    """
)


def _ping_raw(path: Path) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        # as the CLI does: a full backlog (EAGAIN at once on a Unix socket) is waited out
        connect_unix(s, os.fsencode(path), 10)
        s.sendall(b'{"op": "ping"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return dict(json.loads(data))


def _open_idle(path: Path, n: int) -> list[socket.socket]:
    """Open up to ``n`` idle connections; a full listen backlog is waited out (10 s)."""
    opened: list[socket.socket] = []
    deadline = time.monotonic() + 10
    while len(opened) < n and time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX)
        s.setblocking(False)
        try:
            s.connect(os.fsencode(path))
        except BlockingIOError:  # the backlog is full: the daemon is not accepting
            s.close()
            time.sleep(0.01)
            continue
        opened.append(s)
    return opened


@pytest.mark.anyio
async def test_out_of_file_descriptors_the_cli_still_gets_through_and_the_log_stays_quiet(
    sock_dir: Path,
) -> None:
    # The attack: more idle connections than the daemon may open files. Before issue 15
    # the accept loop logged a traceback every second and the CLI was locked out.
    path = sock_dir / "companyd.sock"
    with subprocess.Popen(
        [sys.executable, "-c", _FD_STARVED_DAEMON, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as daemon:
        idle: list[socket.socket] = []
        try:
            assert daemon.stdout is not None
            assert await asyncio.to_thread(daemon.stdout.readline) == "listening\n"
            idle = await asyncio.to_thread(_open_idle, path, 150)
            assert len(idle) == 150
            for _ in range(3):
                answer = await asyncio.to_thread(_ping_raw, path)
                assert answer.get("result", {}).get("pid") == daemon.pid, answer
            idle += await asyncio.to_thread(_open_idle, path, 100)
            answer = await asyncio.to_thread(_ping_raw, path)
            assert answer.get("result", {}).get("pid") == daemon.pid, answer
        finally:
            daemon.send_signal(signal.SIGKILL)
            _, err = await asyncio.to_thread(daemon.communicate, timeout=10)
            for s in idle:
                s.close()
    accept_lines = [line for line in err.splitlines() if "open files" in line or "accept" in line]
    assert len(accept_lines) == 1, err[-3000:]
    assert (
        "Too many open files" in accept_lines[0]
        and "logged at most once a minute" in accept_lines[0]
    )
    assert "Traceback" not in err


_FD_STARVED_BUSY_DAEMON = textwrap.dedent(
    """
    import asyncio, logging, resource, sys
    from companyd.daemon._control import ControlServer

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    class Admin:
        async def ask(self, agent, question, timeout=300.0):
            print("started", flush=True)
            await asyncio.Event().wait()

    class Ctx:
        id = path = "companyd/control"
        def __init__(self):
            self.stopping = asyncio.Event()
        def started(self, info=None):
            print("listening", flush=True)

    asyncio.run(ControlServer(Admin(), sys.argv[1], max_connections=10_000).run(Ctx()))
    """
)


def _fill_with_running_asks(path: Path, lines: Any) -> tuple[list[socket.socket], bytes]:
    """Open connections that each start an ask that never ends, until one is refused;
    returns the connections and the refusal.
    """
    held: list[socket.socket] = []
    for _ in range(200):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(os.fsencode(path))
        held.append(s)
        # refused before the request is written (on a busy machine the daemon's notice and
        # close can come first): the notice is still there to read
        with contextlib.suppress(BrokenPipeError):
            s.sendall(b'{"op": "ask", "args": {"agent": "a", "question": "q"}}\n')
        s.settimeout(0.05)
        while True:  # either the daemon started the ask, or it answered (refused)
            # whichever comes first: its "started" line need not wait out the recv timeout
            ready, _, _ = select.select([s, lines], [], [], 0.05)
            if s not in ready:
                line = lines.readline()
                if line == "started\n":
                    break
                if not line:
                    raise AssertionError("the daemon exited") from None
                continue
            return held, s.recv(65536)
    raise AssertionError("never refused")


@pytest.mark.anyio
async def test_out_of_file_descriptors_with_every_client_busy_the_new_one_is_told_busy(
    sock_dir: Path,
) -> None:
    path = sock_dir / "companyd.sock"
    with subprocess.Popen(
        [sys.executable, "-c", _FD_STARVED_BUSY_DAEMON, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as daemon:
        held: list[socket.socket] = []
        try:
            assert daemon.stdout is not None
            assert await asyncio.to_thread(daemon.stdout.readline) == "listening\n"
            pid = daemon.pid
            async with asyncio.timeout(60):
                held, refusal = await asyncio.to_thread(
                    _fill_with_running_asks, path, daemon.stdout
                )
                answer = await asyncio.to_thread(_ping_raw, path)  # no hang, no reset
        finally:
            daemon.send_signal(signal.SIGKILL)
            _, err = await asyncio.to_thread(daemon.communicate, timeout=10)
            for s in held:
                s.close()
    assert len(held) > 20
    notice = json.loads(refusal)
    busy = "out of file descriptors and every control connection is running an operation"
    assert notice["code"] == "busy" and busy in notice["error"], notice
    # The CLI gets an answer, never a hang or a reset: busy, or served.
    assert busy in answer.get("error", "") or answer["result"]["pid"] == pid, answer
    assert len([line for line in err.splitlines() if "open files" in line]) == 1, err[-3000:]


@pytest.mark.anyio
async def test_a_daemon_that_never_answers_is_a_timeout_after_its_deadline(sock_dir: Path) -> None:
    # A stuck daemon: it accepts the connection and never writes an answer.
    path = sock_dir / "companyd.sock"
    accepted: list[asyncio.StreamWriter] = []

    async def stuck(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(w)

    stuck_server = await asyncio.start_unix_server(stuck, path)
    clock = ManualClock()
    try:
        call = asyncio.ensure_future(ControlClient(path).acall("reload", clock=clock))
        async with asyncio.timeout(10):
            while clock.sleepers == 0 or not accepted:
                await asyncio.sleep(0.01)
            clock.advance(134)  # the daemon's reload deadline is 120 s; we wait 15 s more
            await asyncio.sleep(0.05)
            assert not call.done()
            clock.advance(1)
            with pytest.raises(ControlTimeout, match=r"did not answer 'reload' within 135 s"):
                await call
    finally:
        for w in accepted:
            w.close()
        stuck_server.close()
        await stuck_server.wait_closed()


def test_a_file_that_is_not_a_socket_is_never_replaced(sock_dir: Path) -> None:
    path = sock_dir / "companyd.sock"
    path.write_text("precious")
    with pytest.raises(CompanydError, match="exists and is not a socket"):
        ControlServer(Company(), path).bind()
    assert path.read_text() == "precious"


def test_a_socket_path_over_the_kernel_limit_is_refused_clearly(sock_dir: Path) -> None:
    path = sock_dir / ("d" * 120) / "companyd.sock"
    with pytest.raises(CompanydError, match=r"Unix sockets allow at most 107.*shorter --state-dir"):
        ControlServer(Company(), path).bind()


def test_a_missing_socket_means_not_running(sock_dir: Path) -> None:
    with pytest.raises(DaemonNotRunning, match="does not exist"):
        ControlClient(sock_dir / "companyd.sock").call("status")


def test_permission_denied_says_how_to_get_access(sock_dir: Path) -> None:
    path = sock_dir / "companyd.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(1)

    def attempt() -> str:
        try:
            ControlClient(path).call("status")
        except ControlError as exc:
            return f"ControlError: {exc}"
        return "connected"

    try:
        if os.geteuid() == 0:
            # The daemon's 0600 socket; the operator is another user.
            os.chmod(path, 0o600)
            os.chmod(sock_dir, 0o755)
            message = as_unprivileged(attempt)
        else:
            os.chmod(path, 0)  # even the owner may not connect without write permission
            message = attempt()
    finally:
        sock.close()
    assert message.startswith("ControlError: permission denied on the control socket"), message
    assert "sudo" in message and "--control-group" in message


# ---------------------------------------------------------------------------------------
# discovery


def test_socket_path_prefers_the_runtime_directory(tmp_path: Path) -> None:
    assert socket_path(tmp_path, {}) == tmp_path / "companyd.sock"
    assert socket_path(tmp_path, {"RUNTIME_DIRECTORY": "/run/companyd"}) == Path(
        "/run/companyd/companyd.sock"
    )


def test_candidates_follow_the_daemons_own_order(tmp_path: Path) -> None:
    cfg = tmp_path / "company.yaml"
    cfg.write_text("state_dir: data\nagents: {broken: [\n")  # invalid YAML: still no crash
    assert candidate_sockets(config=cfg, env={})[0] == Path("state").absolute() / "companyd.sock"
    cfg.write_text("state_dir: data\nagents: 3  # schema-invalid, but state_dir is readable\n")
    assert candidate_sockets(config=cfg, env={}) == [
        tmp_path / "data" / "companyd.sock",
        Path("/run/companyd/companyd.sock"),
    ]
    assert candidate_sockets(
        state_dir=tmp_path / "s", env={"RUNTIME_DIRECTORY": "/r", "STATE_DIRECTORY": "/x"}
    ) == [
        Path("/r/companyd.sock"),
        tmp_path / "s" / "companyd.sock",
        Path("/run/companyd/companyd.sock"),
    ]
    assert candidate_sockets(env={"STATE_DIRECTORY": "/var/lib/companyd"})[0] == Path(
        "/var/lib/companyd/companyd.sock"
    )


@pytest.mark.anyio
async def test_find_daemon_by_state_dir_and_never_another_companys(sock_dir: Path) -> None:
    a, b = sock_dir / "a", sock_dir / "b"
    srv = ControlServer(Company(), a / "companyd.sock", state_dir=a)
    async with running(srv.run):
        client = await asyncio.to_thread(find_daemon, state_dir=a, env={})
        assert client.path == a / "companyd.sock"
        # The daemon of `a` answers at $RUNTIME_DIRECTORY, but we asked for `b`'s.
        with pytest.raises(DaemonNotRunning, match="no companyd daemon is running"):
            await asyncio.to_thread(find_daemon, state_dir=b, env={"RUNTIME_DIRECTORY": str(a)})
        # Without --state-dir, the runtime directory's daemon is the one.
        client = await asyncio.to_thread(
            find_daemon, env={"RUNTIME_DIRECTORY": str(a)}, config=sock_dir / "none.yaml"
        )
        assert client.path == a / "companyd.sock"
        client = await asyncio.to_thread(find_daemon, socket=a / "companyd.sock")
        assert client.path == a / "companyd.sock"
    with pytest.raises(DaemonNotRunning) as info:
        find_daemon(state_dir=a, env={})
    assert repr(str(a / "companyd.sock")) in str(info.value)


# ---------------------------------------------------------------------------------------
# the CLI, by its entry point in a thread, against the server in this loop


def _cli_from_root(argv: list[str]) -> CliResult:
    here = os.getcwd()
    os.chdir("/")  # no company.yaml of the working directory is found
    try:
        return cli_in_thread(argv)
    finally:
        os.chdir(here)


async def _cli(*argv: str) -> tuple[int, str, str]:
    """``companyd ARGV`` from ``/``: its exit code, stdout and stderr."""
    async with asyncio.timeout(60):
        got = await asyncio.to_thread(_cli_from_root, list(argv))
    return got.rc, got.out, got.err


@pytest.mark.anyio
async def test_cli_commands_against_a_running_daemon(
    server: tuple[ControlServer, Company], sock_dir: Path
) -> None:
    srv, company = server
    sd = ["--state-dir", str(sock_dir)]
    code, out, err = await _cli("status", *sd)
    assert code == 0, err
    assert out == render_status(json.loads(json.dumps(STATUS)))

    code, out, _ = await _cli("status", "--json", *sd)
    assert (code, json.loads(out)) == (0, json.loads(json.dumps(STATUS)))

    code, out, _ = await _cli("pause", "cfo", *sd)
    assert code == 0 and "paused cfo" in out and company.paused == {"cfo"}
    code, out, _ = await _cli("resume", "cfo", "--socket", str(srv.path))
    assert (code, out.strip(), company.paused) == (0, "resumed cfo", set())

    code, out, err = await _cli("pause", "cfoo", *sd)
    assert code == 1 and out == ""
    assert err.strip() == "companyd: unknown agent 'cfoo'; agents: ceo, cfo, accountant"

    code, out, _ = await _cli("raise-budget", "cfo", "2.50", *sd)
    assert code == 0 and "raised today's budget of cfo by $2.50" in out
    code, out, _ = await _cli("raise-budget", "5", "--json", *sd)
    assert code == 0 and json.loads(out)["agent"] is None
    assert company.raised == [("cfo", 2.5), (None, 5.0)]

    code, out, _ = await _cli("reload", *sd)
    assert (code, out.strip()) == (0, "reloaded company.yaml: started cto; 3 unchanged")
    company.reload_result = {
        "applied": False,
        "errors": ["company.yaml:12:3: agents.cfo.budget: expected daily_usd"],
    }
    code, out, err = await _cli("reload", *sd)
    assert code == 1 and "rejected; the daemon keeps running the previous version" in err
    assert "company.yaml:12:3: agents.cfo.budget" in err
    # a reload the tree applied only in part (an agent that failed to start) is not a clean
    # reload: its own exit code (3, EX_PARTIAL), said in the line; --json unchanged
    company.reload_result = {
        "applied": True,
        "added": ["analyst"],
        "unchanged": 3,
        "failures": ["analyst: no api key"],
    }
    code, out, err = await _cli("reload", *sd)
    assert code == 3, (out, err)
    assert out.strip() == (
        "reloaded company.yaml: started analyst; 3 unchanged; NOT applied: analyst: no api "
        "key (see `journalctl -u companyd`; exit 3)"
    )
    code, out, _ = await _cli("reload", "--json", *sd)
    assert code == 3 and json.loads(out)["failures"] == ["analyst: no api key"]


@pytest.mark.anyio
async def test_cli_exit_codes_for_no_daemon_and_bad_arguments(sock_dir: Path) -> None:
    code, out, err = await _cli("status", "--state-dir", str(sock_dir / "none"))
    assert code == 69 and out == ""
    assert "no companyd daemon is running" in err and str(sock_dir / "none") in err
    code, out, _ = await _cli("status", "--json", "--state-dir", str(sock_dir / "none"))
    assert code == 69 and json.loads(out)["code"] == "not_running"
    code, _, err = await _cli("raise-budget", "cfo", "-3", "--state-dir", str(sock_dir))
    assert code == 2 and "USD must be a positive number" in err and "'-3'" in err
    code, _, err = await _cli("raise-budget", "a", "b", "5", "--state-dir", str(sock_dir))
    assert code == 2 and "expected [AGENT] USD" in err


@pytest.mark.anyio
async def test_cli_internal_error_exits_70(sock_dir: Path) -> None:
    class Broken(Company):
        async def status(self) -> Any:
            raise KeyError("tree")

    srv = ControlServer(Broken(), sock_dir / "companyd.sock", state_dir=sock_dir)
    async with running(srv.run):
        code, _, err = await _cli("status", "--state-dir", str(sock_dir))
    assert code == 70 and "internal error: KeyError" in err


@pytest.mark.anyio
async def test_cli_told_busy_exits_75_with_the_reason(sock_dir: Path) -> None:
    company = Company()
    srv = ControlServer(company, sock_dir / "companyd.sock", state_dir=sock_dir, max_connections=1)
    async with running(srv.run):
        # The ask's deadline covers the CLI below, which took seconds to start as a
        # subprocess on a loaded machine: 10 s was not enough under a parallel run.
        ask = asyncio.ensure_future(
            _raw(
                srv.path,
                b'{"op": "ask", "args": {"agent": "cfo", "question": "q"}}\n',
                timeout=120,
            )
        )
        await _until(lambda: srv.busy_connections == 1, "the running ask")
        code, _, err = await _cli("status", "--state-dir", str(sock_dir))
        company.slow_release.set()
        async with asyncio.timeout(10):
            await ask
    assert code == 75, err
    assert "busy: the control socket serves at most 1 connections" in err
    assert "Traceback" not in err


@pytest.mark.anyio
async def test_during_the_daemon_s_stop_the_cli_is_told_it_stops_not_that_none_runs(
    sock_dir: Path,
) -> None:
    """The daemon stops its control socket first, then gives its agents their grace: the
    socket stays bound through it, every request but ``ping`` answered ``stopping`` (exit
    75) — not "no companyd daemon is running" (69), after which a command would work on
    the files the daemon still writes — until the daemon closes it.
    """
    srv = ControlServer(Company(), sock_dir / "companyd.sock", state_dir=sock_dir)
    async with running(srv.run):
        srv.hold_through_stop()  # what Daemon.stop does before stopping its tree
    # the child has returned (the tree goes on to the agents): the socket still answers
    code, out, err = await _cli("status", "--json", "--state-dir", str(sock_dir))
    assert code == 75, err
    assert json.loads(out)["code"] == "stopping"
    assert err.startswith("companyd: the daemon is stopping"), err
    assert "run the command again once the daemon has started" in err
    await srv.close()
    assert not srv.path.exists()
    code, _, err = await _cli("status", "--state-dir", str(sock_dir))
    assert code == 69 and "no companyd daemon is running" in err, err
    # started again (a supervisor's restart, the daemon leading again): it serves anew
    async with running(srv.run):
        assert (await ControlClient(srv.path).acall("status"))["company"]["name"]


# ---------------------------------------------------------------------------------------
# the status printer


def test_status_rendering_shows_every_part() -> None:
    text = render_status(STATUS)
    lines = text.splitlines()
    assert lines[0] == (
        "companyd 0.1.0 · Northwind Solo · running · pid 4242 · up 2h 03m · OFFLINE model"
    )
    assert "loop lag 1 ms (max 48 ms)" in lines[1]
    assert any(line.startswith("companyd ") and "running" in line for line in lines[2:])
    tree = "\n".join(lines)
    assert "└─ agents" in tree and "      ├─ cfo" in tree and "      └─ accountant" in tree
    assert "paused (operator)" in tree
    assert "restarting" in tree and "last exit: error:RuntimeError('boom')" in tree
    assert "Runs in flight (1)" in tree
    assert "ceo  run-3f9c2a1b7d4e  routine weekly-priorities  1m 12s  $0.02" in tree
    today = next(line for line in lines if line.strip().startswith("today"))
    assert "$1.23" in today and "$10.00" in today and "12%" in today
    month = next(line for line in lines if "this month" in line)
    assert "$12.34" in month and "$200.00" in month and "6%" in month
    routines = [line.strip() for line in lines[lines.index("Next routines") + 1 :]]
    assert routines[0].startswith("in 3h 12m")  # soonest first
    assert "weekly-priorities → ceo  last: ok" in routines[0]
    assert "month-close → cfo" in routines[1]
    assert "Alerts: telegram degraded, 2 queued" in text
    # a company in Berlin: its clock, the zone named as an alert's footer names it (CET)
    berlin = {**STATUS, "company": {"name": "Northwind Solo", "timezone": "Europe/Berlin"}}
    soonest = render_status(berlin).split("Next routines\n", 1)[1].splitlines()[0].split()
    assert soonest[:6] == ["in", "3h", "12m", "2027-01-15", "12:12", "CET"], soonest


def test_status_line_for_systemd_and_chat() -> None:
    assert (
        status_line(STATUS) == "2/3 agents up, 1 paused · 1 run in flight · $1.23 of $10.00 today"
    )
    assert status_line({}) == "running"
    assert status_line({"daemon": {"state": "reloading"}}).startswith("reloading")


@pytest.mark.parametrize(
    "status",
    [
        {},
        {"tree": "x", "spend": [], "routines": {}, "runs_in_flight": None, "daemon": 3},
        {
            "tree": {"children": [1, None, {"children": "no"}]},
            "spend": {"today": {"used_usd": "a"}},
        },
        {"routines": [{"next_fire": 1e300}, {"next_fire": float("nan")}], "now": "yesterday"},
    ],
)
def test_status_rendering_survives_missing_and_wrong_keys(status: dict[str, Any]) -> None:
    assert render_status(status, now=NOW).endswith("\n")
    status_line(status)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)
_keys = st.sampled_from(
    ["daemon", "company", "tree", "runs_in_flight", "spend", "routines", "alerts", "agents", "now"]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _json, max_size=9))
def test_status_rendering_never_raises_on_any_json(status: dict[str, Any]) -> None:
    render_status(status, now=NOW)
    status_line(status)


def test_control_error_is_a_companyd_error() -> None:
    assert issubclass(ControlError, CompanydError)


def test_status_says_which_half_of_telegram_works() -> None:
    """Sending and receiving are told apart (issue 15 item 7): commands failing since when,
    and why; both halves fine stays the short 'telegram ok'.
    """
    failing = {
        **STATUS,
        "now": NOW,
        "company": {"name": "N", "timezone": "UTC"},
        "alerts": {
            "telegram": "ok",
            "queued": 0,
            "commands": "failing",
            "commands_since": NOW - 600,  # 07:50 UTC the same day
            "commands_error": "401 Unauthorized",
        },
    }
    text = render_status(failing)
    assert "Alerts: telegram sending ok · commands failing since 07:50 (401 Unauthorized)" in text
    older = {**failing, "alerts": {**failing["alerts"], "commands_since": NOW - 2 * 86400}}
    assert "commands failing since 2027-01-13 08:00 (401 Unauthorized)" in render_status(older)
    fine = {**failing, "alerts": {"telegram": "ok", "queued": 0, "commands": "ok"}}
    assert "Alerts: telegram ok\n" in render_status(fine)


def test_status_says_how_each_other_channel_is_doing() -> None:
    """``alerts.channels`` (issue 30): one line, each channel ok, failing since when and why,
    or unset; no line without channels.
    """
    alerts = {"telegram": "ok", "queued": 0, "commands": "ok"}
    channels = [
        {"name": "email", "state": "ok", "since": None, "error": ""},
        {"name": "slack", "state": "failing", "since": NOW - 600, "error": "https send failed"},
        {"name": "ntfy", "state": "unset", "since": None, "error": "$NTFY_URL is not set"},
    ]
    base = {**STATUS, "now": NOW, "company": {"name": "N", "timezone": "UTC"}}
    text = render_status({**base, "alerts": {**alerts, "channels": channels}})
    assert (
        "Channels: email ok · slack failing since 07:50 (https send failed) · "
        "ntfy unset ($NTFY_URL is not set)\n"
    ) in text
    assert "Channels:" not in render_status({**base, "alerts": alerts})


@pytest.mark.anyio
async def test_no_answer_carries_a_secret(server: tuple[ControlServer, Company]) -> None:
    """Answers pass the one redactor: registered secrets and values that look like one."""
    from companyd._secrets import SECRETS

    srv, company = server
    SECRETS.add("registered-control-secret-value")
    key = "sk-ant-api03-" + "C" * 40
    company.reload_result = {
        "applied": False,
        "errors": [f"x: got {key!r}", "registered-control-secret-value"],
    }
    company.agents.append(key)  # an unknown-agent error quotes the agent list
    answers = await _raw(
        srv.path,
        b'{"op": "reload"}\n',
        b'{"op": "pause", "args": {"agent": "nobody"}}\n',
    )
    text = json.dumps(answers)
    assert key not in text and "registered-control-secret-value" not in text
    assert answers[0]["result"]["errors"][0] == "x: got '<anthropic-api-key>'"
    assert answers[1]["ok"] is False and "<anthropic-api-key>" in answers[1]["error"]


def test_a_full_listen_backlog_is_waited_out_not_reported_as_an_error(sock_dir: Path) -> None:
    # A Unix socket with a timeout fails connect() at once with EAGAIN while the daemon's
    # backlog is full (seen in CI: a flood of idle connections, the CLI's ping refused).
    path = sock_dir / "backlog.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(os.fsencode(path))
        listener.listen(0)
        filling: list[socket.socket] = []
        try:
            while True:  # fill the backlog until the kernel says EAGAIN
                s = socket.socket(socket.AF_UNIX)
                s.setblocking(False)
                try:
                    s.connect(os.fsencode(path))
                except BlockingIOError:
                    s.close()
                    break
                filling.append(s)
                assert len(filling) < 1000, "the backlog never filled"
            freed = threading.Timer(0.3, lambda: listener.accept()[0].close())
            freed.start()
            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(10)
                connect_unix(client, os.fsencode(path), 10)  # waits for the accept above
            freed.join(5)
        finally:
            for s in filling:
                s.close()


def test_money_shows_non_zero_amounts_as_non_zero_with_one_precision_per_table() -> None:
    """Issue 28: a budget under a cent is not "$0.00", and one table prints all its money
    with one precision (the status spend table; `companyd spend`; `companyd budget`).
    """
    from companyd.spend._reports import format_budget_report, format_spend_report

    status = {
        "spend": {
            "today": {"used_usd": 0.0012, "reserved_usd": 0.0, "limit_usd": 0.004},
            "month": {"used_usd": 0.0012, "reserved_usd": 0.0, "limit_usd": 5.0},
            "agents": [{"agent": "cfo", "today_usd": 0.0012, "daily_limit_usd": 0.004}],
        }
    }
    lines = render_status(status, now=NOW).splitlines()
    money = [w for ln in lines for w in ln.split() if w.startswith("$")]
    assert "$0.004" in money and "$0.00" not in money, money
    assert {len(m.split(".")[1]) for m in money} == {3}, money  # one precision
    assert "$0.0012 of $0.004 today" in status_line(status)  # each exact, not "$0.001"

    row = {
        "calls": 1,
        "input_tokens": 10,
        "cache_write_5m_tokens": 0,
        "cache_write_1h_tokens": 0,
        "cache_read_tokens": 0,
        "output_tokens": 5,
    }
    report = {
        "by": "agent",
        "period": {"label": "today", "from": "2026-11-28", "to": "2026-11-28"},
        "rows": [
            {**row, "key": "ceo", "cost_usd": 12.5, "cost_usd_exact": "12.5"},
            {**row, "key": "cfo", "cost_usd": 0.0000071, "cost_usd_exact": "0.0000071"},
        ],
        "total": {**row, "key": None, "cost_usd": 12.5000071, "cost_usd_exact": "12.5000071"},
    }
    costs = [ln.split()[-1] for ln in format_spend_report(report).splitlines()[3:]]
    assert costs == ["$12.50000", "$0.00001", "$12.50001"], costs  # not $0.0000
    budgets = {
        "timezone": "UTC",
        "now": "2026-11-28T10:00:00+00:00",
        "budgets": [
            {
                "agent": None,
                "period": "day",
                "key": "2026-11-28",
                "limit_usd": 0.004,
                "used_usd": 0.0,
                "used_fraction": 0.0,
                "reserved_usd": 0.0,
                "remaining_usd": 0.004,
                "resets_at": "2026-11-29T00:00:00+00:00",
            }
        ],
    }
    (line,) = format_budget_report(budgets).splitlines()[3:]
    assert "$0.0040" in line and "$0.00 " not in f"{line} ", line
