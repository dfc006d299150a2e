"""What alerting costs the daemon, measured against baselines in the same run.

Runs AlertService with the real python-telegram-bot against the loopback Bot API stand-in
and reports:

1. intake: events/s the service turns into outbox rows while Telegram is down (every
   event is written to SQLite before anything is sent), for a crash storm (one coalesced
   alert) and for distinct alerts (one row each) — vs a bare subscriber draining the same
   events from the same bus;
2. event-loop lag: the worst delay of a 5 ms ticker during the distinct-alert burst, vs the
   same ticker during the bare drain;
3. noise: Telegram messages and edits for a storm of crashes spread over one minute;
4. recovery: after a 60 s outage (the service clock moves; the outage itself is short),
   seconds until every waiting alert is delivered, vs the same number of direct
   ``send_message`` calls one after another.

Usage: .venv/bin/python bench/alerts.py [--events N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from companyd.alerts._service import AlertService
from companyd.clock import ManualClock
from companyd.config import load_config
from companyd.events import EventBus
from companyd.testing.bot_api import BotApiServer

TOKEN = "123456789:AAH-bench-token-0123456789abcdefghij"


class Admin:
    """Enough of the Admin protocol for a benchmark (no commands are sent)."""

    async def status(self) -> dict[str, Any]:
        return {}


class Ctx:
    id = "alerts"
    path = "companyd/alerts"

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()

    def started(self, info: Any = None) -> None:
        self.ready.set()


def config(dirpath: Path, api_url: str) -> Any:
    doc = {
        "schema": "companyd/v1",
        "company": {"name": "Bench", "timezone": "UTC", "budget": {"daily_usd": 10}},
        "agents": {"ceo": {"title": "CEO", "instructions": "x"}},
        "alerts": {"min_severity": "info", "telegram": {"chat_ids": [111], "api_url": api_url}},
    }
    dirpath.mkdir(parents=True, exist_ok=True)
    path = dirpath / "company.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(path)


class LagMonitor:
    """Lateness of a periodic 5 ms ticker (how long the loop was blocked), and the longest
    full (generation 2) garbage collection meanwhile — a whole-process pause that no code
    on the loop can avoid, reported so the lag figure can be read.
    """

    def __init__(self) -> None:
        self.worst = 0.0
        self.worst_without_gc = 0.0
        self.gc2 = 0.0
        self._gc2_runs = 0
        self._gc_start = 0.0
        self._task: asyncio.Task[None] | None = None

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc2 = max(self.gc2, time.perf_counter() - self._gc_start)
            self._gc2_runs += 1

    async def _tick(self) -> None:
        while True:
            t0, runs = time.perf_counter(), self._gc2_runs
            await asyncio.sleep(0.005)
            late = time.perf_counter() - t0 - 0.005
            self.worst = max(self.worst, late)
            if self._gc2_runs == runs:
                self.worst_without_gc = max(self.worst_without_gc, late)

    def __enter__(self) -> LagMonitor:
        gc.callbacks.append(self._gc)
        self._task = asyncio.create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        gc.callbacks.remove(self._gc)


async def until(cond: Callable[[], bool], timeout: float = 300.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():  # noqa: ASYNC110  # polls state owned by the service under test
            await asyncio.sleep(0.002)


async def with_service(
    tmp: Path,
    server: BotApiServer,
    clock: ManualClock,
    bus: EventBus,
    body: Callable[[AlertService], Awaitable[None]],
) -> None:
    svc = AlertService(
        config(tmp, server.url),
        tmp / "state",
        bus=bus,
        admin=Admin(),  # type: ignore[arg-type]
        clock=clock,
    )
    ctx = Ctx()
    task = asyncio.create_task(svc.run(ctx))
    await ctx.ready.wait()
    await until(lambda: svc.snapshot()["telegram"] == "ok")
    try:
        await body(svc)
    finally:
        ctx.stopping.set()
        await task
        svc.close()


async def bare_drain(n: int) -> tuple[float, float]:
    """Baseline: a subscriber that only takes events off the bus."""
    bus = EventBus()
    sub = bus.subscribe(maxsize=n + 10)
    with LagMonitor() as lag:
        await asyncio.sleep(0.05)
        t0 = time.perf_counter()
        for i in range(n):
            bus.emit("routine_failed", "scheduler", routine=f"r{i}", reason="x")
            if i % 100 == 0:
                await asyncio.sleep(0)
        got = 0
        while got < n:
            await sub.get()
            got += 1
        elapsed = time.perf_counter() - t0
    return n / elapsed, lag.worst


async def intake(tmp: Path, n: int, distinct: bool) -> tuple[float, float, float, float]:
    clock = ManualClock()
    bus = EventBus(clock)
    result: dict[str, float] = {}
    async with BotApiServer(token=TOKEN) as server:

        async def body(svc: AlertService) -> None:
            await server.go_down("refuse")  # measure intake, not Telegram
            with LagMonitor() as lag:
                await asyncio.sleep(0.05)
                t0 = time.perf_counter()
                for i in range(n):
                    if distinct:
                        bus.emit("routine_failed", "scheduler", routine=f"r{i}", reason="x")
                    else:
                        bus.emit(
                            "restart", "companyd/agents", child="ceo", reason="error:x", restarts=i
                        )
                    if i % 100 == 0:
                        await asyncio.sleep(0)
                want = n if distinct else 1
                await until(lambda: len(svc._book.alerts) >= want and svc._sub.get_nowait() is None)
                result["rate"] = n / (time.perf_counter() - t0)
                result["lag"] = lag.worst
                result["gc2"] = lag.gc2
                result["lag_nogc"] = lag.worst_without_gc
            await server.go_up()

        await with_service(tmp, server, clock, bus, body)
    return result["rate"], result["lag"], result["gc2"], result["lag_nogc"]


async def noise(tmp: Path, crashes: int) -> tuple[int, int]:
    clock = ManualClock()
    bus = EventBus(clock)
    counts: dict[str, int] = {}
    async with BotApiServer(token=TOKEN) as server:

        async def body(svc: AlertService) -> None:
            for i in range(crashes):
                bus.emit("child_exited", "companyd/agents", child="ceo", reason="error:x")
                bus.emit(
                    "restart", "companyd/agents", child="ceo", reason="error:x", restarts=i + 1
                )
                # Real crashes come 60 ms apart: let the service take them in before the
                # service clock moves on (else the clock outruns the intake).
                await until(lambda: not svc._sub._queue)
                clock.advance(60.0 / crashes)
                await asyncio.sleep(0)
            for _ in range(200):
                if server.messages and f"{crashes} crashes" in server.messages[-1].text:
                    break
                clock.advance(5)
                await asyncio.sleep(0.01)
            counts["sends"] = len(server.calls_of("sendMessage"))
            counts["edits"] = len(server.calls_of("editMessageText"))

        await with_service(tmp, server, clock, bus, body)
    return counts["sends"], counts["edits"]


async def recovery(tmp: Path, n: int) -> tuple[float, float]:
    clock = ManualClock()
    bus = EventBus(clock)
    out: dict[str, float] = {}
    async with BotApiServer(token=TOKEN) as server:

        async def body(svc: AlertService) -> None:
            from telegram import Bot

            async with Bot(TOKEN, base_url=f"{server.url}/bot") as bot:
                t0 = time.perf_counter()
                for i in range(n):
                    await bot.send_message(111, f"baseline {i}")
                out["direct"] = time.perf_counter() - t0
            server.reset()
            await server.go_down("refuse")
            for i in range(n):
                bus.emit("routine_failed", "scheduler", routine=f"r{i}", reason="x")
            for _ in range(60):
                clock.advance(1.0)
                await asyncio.sleep(0.005)
            await server.go_up()
            t0 = time.perf_counter()
            while svc.snapshot()["queued"]:
                clock.advance(1.0)
                await asyncio.sleep(0.002)
            out["all"] = time.perf_counter() - t0
            assert len(server.messages) == n, len(server.messages)

        await with_service(tmp, server, clock, bus, body)
    return out["all"], out["direct"]


async def main(n: int) -> None:
    # The outages below are deliberate; their warnings would only clutter the figures.
    logging.basicConfig(level=logging.CRITICAL)
    os.environ["TELEGRAM_BOT_TOKEN"] = TOKEN
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base_rate, base_lag = await bare_drain(n)
        storm_rate, _, _, _ = await intake(tmp / "storm", n, distinct=False)
        dist_rate, dist_lag, dist_gc, dist_nogc = await intake(tmp / "distinct", n, distinct=True)
        sends, edits = await noise(tmp / "noise", 1000)
        rec_all, rec_direct = await recovery(tmp / "recovery", 50)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU, {platform.platform()}, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"bare drain: {base_rate:,.0f} events/s, worst loop lag {base_lag * 1000:.1f} ms")
    print(
        f"intake, crash storm (1 alert): {storm_rate:,.0f} events/s "
        f"= {base_rate / storm_rate:.0f}x slower than the bare drain"
    )
    print(
        f"intake, distinct alerts: {dist_rate:,.0f} events/s "
        f"= {base_rate / dist_rate:.0f}x slower than the bare drain"
    )
    print(
        f"worst loop lag during distinct intake: {dist_lag * 1000:.1f} ms, "
        f"{dist_nogc * 1000:.1f} ms outside full GCs (longest full GC {dist_gc * 1000:.1f} ms); "
        f"bare drain {base_lag * 1000:.1f} ms"
    )
    print(f"1000 crashes in 60 s: {sends} message(s), {edits} edit(s)")
    print(
        f"recovery after a 60 s outage: 50 alerts delivered in {rec_all:.2f} s "
        f"= {rec_all / rec_direct:.1f}x 50 direct sends ({rec_direct:.2f} s)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=5000)
    asyncio.run(main(parser.parse_args().events))
