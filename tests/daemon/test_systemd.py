"""sd_notify, the watchdog, STATUS= updates and the loop-lag monitor, against a real
datagram receiver standing in for systemd's notify socket.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest

from companyd.clock import ManualClock
from companyd.daemon._systemd import (
    LoopLagMonitor,
    Notifier,
    StatusUpdater,
    Watchdog,
    scrub_environment,
)
from companyd.events import EventBus
from companyd.testing.daemon import Ctx, receiver, running


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_messages_arrive_as_sd_notify_datagrams(kind: str) -> None:
    with receiver(kind) as r:
        n = Notifier.from_env({"NOTIFY_SOCKET": r.address})
        assert n.enabled
        assert n.ready("3 agents running")
        assert r.get() == "READY=1\nSTATUS=3 agents running"
        assert n.status("spend today 5 €")  # UTF-8: the sdnotify package drops this one
        assert r.get() == "STATUS=spend today 5 €"
        assert n.watchdog()
        assert r.get() == "WATCHDOG=1"
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert n.reloading("reloading company.yaml")
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        lines = r.get().split("\n")
        assert lines[0] == "RELOADING=1"
        key, _, value = lines[1].partition("=")
        assert key == "MONOTONIC_USEC" and before <= int(value) <= after
        assert lines[2] == "STATUS=reloading company.yaml"
        assert n.stopping()
        assert r.get() == "STOPPING=1"
        n.close()


def test_without_notify_socket_everything_is_a_no_op() -> None:
    n = Notifier.from_env({})
    assert not n.enabled
    assert n.watchdog_interval is None
    assert n.ready("x") is False
    assert n.watchdog() is False
    assert n.stopping() is False
    assert n.reloading() is False


def test_status_is_one_line_and_raw_lines_cannot_smuggle_keys() -> None:
    with receiver() as r, Notifier(r.address) as n:
        n.status("first line\nREADY=1")
        assert r.get() == "STATUS=first line READY=1"
        with pytest.raises(ValueError, match="KEY=VALUE without a newline"):
            n.notify("STATUS=a\nREADY=1")
        with pytest.raises(ValueError, match="KEY=VALUE"):
            n.notify("READY")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "2000000"}, 2.0),
        ({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}, 2.0),
        ({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
        ({"WATCHDOG_USEC": "soon"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_honours_watchdog_pid(
    env: dict[str, str], expected: float | None
) -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": "/nonexistent", **env})
    assert n.watchdog_interval == expected


def test_unset_environment_hides_systemd_from_subprocesses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "@x")
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    n = Notifier.from_env(unset_environment=True)
    assert n.address == "@x" and n.watchdog_interval == 1.0
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        assert name not in os.environ
    env = {"NOTIFY_SOCKET": "a", "PATH": "/bin"}
    scrub_environment(env)
    assert env == {"PATH": "/bin"}


def test_a_vanished_notify_socket_is_reported_once_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with receiver() as r:
        address = r.address
    n = Notifier(address)  # the receiver is gone: ENOENT / ECONNREFUSED
    with n, caplog.at_level(logging.WARNING, logger="companyd.daemon.systemd"):
        assert n.ready() is False
        assert n.watchdog() is False
    warnings = [rec for rec in caplog.records if "cannot send" in rec.getMessage()]
    assert len(warnings) == 1
    assert repr(address) in warnings[0].getMessage()


@pytest.mark.anyio
async def test_watchdog_pings_every_half_interval_on_the_clock() -> None:
    clock = ManualClock()
    with receiver() as r, Notifier(r.address, watchdog_usec=2_000_000) as n:
        wd = Watchdog(n, clock)
        assert wd.interval == 1.0
        async with running(wd.run, Ctx(path="companyd/watchdog")) as ctx:
            assert ctx.info == {"interval": 1.0}
            for _ in range(3):
                await _until(lambda: clock.sleepers == 1)
                clock.advance(1.0)
            await _until(lambda: wd.pings == 4)
        assert r.drain() == ["WATCHDOG=1"] * 4


@pytest.mark.anyio
async def test_watchdog_withholds_pings_while_the_health_check_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    healthy: dict[str, bool | None] = {"ok": False}

    def health() -> bool:
        if healthy["ok"] is None:
            raise RuntimeError("health check crashed")
        return bool(healthy["ok"])

    with receiver() as r, Notifier(r.address, watchdog_usec=1_000_000) as n:
        wd = Watchdog(n, clock, health=health)
        async with running(wd.run):
            for state in (False, False, True, None, True):
                await _until(lambda: clock.sleepers == 1)
                healthy["ok"] = state
                clock.advance(0.5)
            await _until(lambda: wd.pings + wd.skipped == 6)
        # ticks: initial(unhealthy) F F T None(raises → unhealthy) T
        assert wd.skipped == 4 and wd.pings == 2
        assert r.drain() == ["WATCHDOG=1"] * 2
    assert any("withholding" in rec.getMessage() for rec in caplog.records)


@pytest.mark.anyio
async def test_watchdog_without_an_interval_idles_until_stopped() -> None:
    with receiver() as r, Notifier(r.address) as n:
        wd = Watchdog(n, ManualClock())
        async with running(wd.run) as ctx:
            assert ctx.info == {"interval": None}
        assert wd.pings == 0 and r.drain() == []


@pytest.mark.anyio
async def test_status_updater_sends_only_changes() -> None:
    clock = ManualClock()
    texts = iter(["2 agents up", "2 agents up", "3 agents up", "3 agents up"])
    with receiver() as r, Notifier(r.address) as n:
        upd = StatusUpdater(n, lambda: next(texts), clock, interval=10)
        async with running(upd.run):
            for _ in range(3):
                await _until(lambda: clock.sleepers == 1)
                clock.advance(10)
            await _until(lambda: clock.sleepers == 1)
        assert r.drain() == ["STATUS=2 agents up", "STATUS=3 agents up"]


@pytest.mark.anyio
async def test_loop_lag_is_measured_and_an_excursion_is_told_once() -> None:
    clock = ManualClock()
    bus = EventBus(clock)
    mon = LoopLagMonitor(clock, bus, interval=0.5, warn_after=1.0)
    async with running(mon.run, Ctx(path="companyd/lag")):
        for late in (0.0, 2.0, 3.0, 0.2, 1.5):
            await _until(lambda: clock.sleepers == 1)
            n = mon.samples
            clock.advance(0.5 + late)

            def sampled(n: int = n) -> bool:
                return mon.samples == n + 1

            await _until(sampled)
            assert mon.current == pytest.approx(late)
    assert mon.max == pytest.approx(3.0)
    events = bus.recent({"loop_lag"})
    # 2.0 starts an excursion, 3.0 continues it, 0.2 ends it, 1.5 starts a new one
    assert [e.data["lag_s"] for e in events] == [2.0, 1.5]
    assert events[0].source == "companyd/lag" and str(events[0].severity) == "warning"
    assert mon.stats().to_dict() == {"current_ms": 1500.0, "max_ms": 3000.0, "samples": 5}


_BLOCKER = textwrap.dedent(
    """
    import asyncio, time
    from companyd.daemon._systemd import LoopLagMonitor, Notifier, Watchdog

    class Ctx:
        id = path = "companyd/watchdog"
        def __init__(self):
            self.stopping = asyncio.Event()
        def started(self, info=None):
            pass

    async def main():
        n = Notifier.from_env()
        wd, lag = Watchdog(n), LoopLagMonitor(interval=0.02, warn_after=10)
        ctx = Ctx()
        tasks = [asyncio.create_task(wd.run(ctx)), asyncio.create_task(lag.run(ctx))]
        while wd.pings < 3:
            await asyncio.sleep(0.01)
        n.status("blocking")
        time.sleep(1.0)          # a synchronous call freezes the event loop
        n.status("unblocked")
        seen = wd.pings
        while wd.pings < seen + 3:
            await asyncio.sleep(0.01)
        n.status(f"lag {lag.max:.3f}")
        ctx.stopping.set()
        await asyncio.gather(*tasks)
        n.stopping()

    asyncio.run(main())
    """
)


def test_a_blocked_event_loop_stops_the_watchdog_pings() -> None:
    with receiver() as r:
        env = {**os.environ, "NOTIFY_SOCKET": r.address, "WATCHDOG_USEC": "100000"}
        proc = subprocess.Popen([sys.executable, "-c", _BLOCKER], env=env)
        try:
            messages: list[str] = []
            while "STOPPING=1" not in messages:
                messages.append(r.get())  # 10 s deadline per datagram
            assert proc.wait(timeout=10) == 0
        finally:
            proc.kill()
            proc.wait()
    i_block = messages.index("STATUS=blocking")
    i_unblock = messages.index("STATUS=unblocked")
    assert messages[:i_block].count("WATCHDOG=1") >= 3
    # The loop was frozen for 1 s, twenty ping periods: not one ping got out.
    assert messages[i_block + 1 : i_unblock] == []
    assert messages[i_unblock + 1 :].count("WATCHDOG=1") >= 3
    lag_line = next(m for m in messages if m.startswith("STATUS=lag "))
    assert float(lag_line.split()[1]) >= 0.5  # the monitor saw the freeze


async def _until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0)
