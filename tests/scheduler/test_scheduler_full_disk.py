"""The routine history on a real full disk (a small tmpfs): ``jobs`` (and so ``status``)
answers "unavailable" at every moment of the scheduler's retries, never the store's error.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from companyd._aio import race
from companyd._fs import DiskAlarm
from companyd.admin import AdminError
from companyd.agents import ResultApprovals
from companyd.clock import ManualClock
from companyd.desk import Desk
from companyd.events import EventBus
from companyd.scheduler._service import DISK_RETRY_SECONDS, RoutineScheduler
from companyd.supervision._child import StandaloneContext
from companyd.testing.disk import DiskUnavailable, fill, small_disk

from .conftest import ScriptedSink, company, ts

pytestmark = pytest.mark.anyio

DAILY = """\
daily-post:
  assignee: marketing
  description: Draft today's post.
  trigger: {cron: "0 14 * * *", timezone: UTC}
"""


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with small_disk(tmp_path / "disk", "16m") as d:
            yield d
    except DiskUnavailable as exc:
        pytest.skip(f"no real full disk here: {exc}")


async def _stop(ctx: StandaloneContext, clock: ManualClock, running: asyncio.Future[None]) -> None:
    """Ask the scheduler child to stop, wake its retry sleep, wait for it (10 s at most)."""
    ctx.stopping.set()
    clock.advance(DISK_RETRY_SECONDS)
    with contextlib.suppress(Exception):
        async with asyncio.timeout(10):
            await running


async def test_jobs_answers_unavailable_while_the_history_is_retried_on_a_full_disk(
    disk: Path,
) -> None:
    """Chaos run (seed 4): ``status`` during the full-disk fault failed with "cannot open
    routines.sqlite: disk I/O error": it asked the store the scheduler was opening for a
    retry (30 s, 10 ms at 2880x, so most of the time under load) and got its error.
    """
    state = disk / "state"
    state.mkdir()
    filler = fill(disk)
    clock = ManualClock(start=ts("2027-01-04T12:00:00"))
    sched = RoutineScheduler(
        company(DAILY),
        ScriptedSink(),
        state_dir=state,
        bus=EventBus(clock),
        clock=clock,
        max_sleep=None,
    )
    ctx = StandaloneContext("scheduler")
    running = asyncio.ensure_future(sched.run(ctx))
    answers: set[str] = set()
    try:
        async with asyncio.timeout(30):
            await ctx.ready.wait()  # the control socket starts after the scheduler is up
            for turn in range(400):
                await asyncio.sleep(0)
                try:
                    await sched.jobs()
                    answers.add("jobs")
                except AdminError:
                    answers.add("unavailable")
                except RuntimeError as exc:
                    if "needs a started" not in str(exc):
                        raise
                    answers.add("not started")
                if turn % 20 == 0:
                    clock.advance(DISK_RETRY_SECONDS)
    finally:
        await _stop(ctx, clock, running)
        filler.unlink()
    assert answers <= {"unavailable"}, answers


async def test_the_routine_history_reports_its_recovery_to_the_disk_alarm(disk: Path) -> None:
    """Chaos review: the routine history reported ``failed`` but never ``recovered``, so an
    outage only the history saw never cleared and no later outage raised an alert.
    """
    state = disk / "state"
    state.mkdir()
    filler = fill(disk)
    clock = ManualClock(start=ts("2027-01-04T12:00:00"))
    bus = EventBus(clock)
    sched = RoutineScheduler(
        company(DAILY), ScriptedSink(), state_dir=state, bus=bus, clock=clock, max_sleep=None
    )
    ctx = StandaloneContext("scheduler")
    running = asyncio.ensure_future(sched.run(ctx))
    try:
        async with asyncio.timeout(30):
            await ctx.ready.wait()
            assert DiskAlarm.of(bus).failing == {"routine history"}
            filler.unlink()
            while DiskAlarm.of(bus).failing:
                clock.advance(DISK_RETRY_SECONDS)
                await asyncio.sleep(0.01)
        kinds = [e.kind for e in bus.recent({"state_disk_full", "state_disk_recovered"})]
        assert kinds == ["state_disk_full", "state_disk_recovered"]
    finally:
        await _stop(ctx, clock, running)
        filler.unlink(missing_ok=True)


async def test_a_start_whose_desk_read_fails_on_a_full_disk_waits_degraded(
    tmp_path: Path, disk: Path
) -> None:
    """CI chaos test: the scheduler crash-restarted 62 times in one full-disk outage. Its
    start reads the founder's desk for a fire whose result waited for approval, and the
    desk's file failed with a raw ``sqlite3.OperationalError``, which was not taken for a
    disk failure. The start must wait degraded (ready, no crash) and settle the fire once
    the disk takes writes again.
    """
    clock = ManualClock(start=ts("2027-01-04T12:00:30"))
    bus = EventBus(clock)
    sink = ScriptedSink(hold=True)
    config = company("slow: {assignee: coo, description: Slow., trigger: {every: 1m}}\n")
    state = tmp_path / "state"
    # A fire handed over to the agents when the scheduler stopped: it stays open.
    first = RoutineScheduler(config, sink, state_dir=state, bus=bus, clock=clock, max_sleep=None)
    ctx = StandaloneContext("scheduler")
    child = asyncio.ensure_future(first.run(ctx))
    async with asyncio.timeout(10):
        await ctx.ready.wait()
        clock.advance(30)
        await sink.entered.wait()
        ctx.stopping.set()
        await child
    # The desk lives on a disk that is full before its file was ever created.
    filler = fill(disk)
    desk = Desk(disk / "desk.sqlite", bus=bus, clock=clock)
    gate = ResultApprovals(desk, sink.submit)
    sched = RoutineScheduler(
        config, sink, state_dir=state, bus=bus, clock=clock, max_sleep=None, gate=gate
    )
    ctx = StandaloneContext("scheduler")
    running = asyncio.ensure_future(sched.run(ctx))
    try:
        async with asyncio.timeout(30):
            await race(ctx.ready.wait(), running)  # a crash ends the child before ready
            assert not running.done(), running.exception()
            for _ in range(3):  # retries on the full disk: still running, never raising
                clock.advance(DISK_RETRY_SECONDS)
                await asyncio.sleep(0.05)
            assert not running.done(), running.exception()
            assert DiskAlarm.of(bus).failing == {"founder's desk"}
            with pytest.raises(AdminError, match="routines are unavailable"):
                await sched.jobs()
            filler.unlink()
            while not sched.running:
                assert not running.done(), running.exception()
                clock.advance(DISK_RETRY_SECONDS)
                await asyncio.sleep(0.01)
        assert not DiskAlarm.of(bus).failing
    finally:
        await _stop(ctx, clock, running)
        await desk.close()
        filler.unlink(missing_ok=True)


WEEKLY = """\
weekly-note:
  assignee: coo
  description: Write the weekly note.
  trigger: {cron: "0 9 * * mon", timezone: UTC}
"""


async def test_a_reload_on_a_full_disk_keeps_the_routines_it_armed(disk: Path) -> None:
    """A reload whose routine history cannot be written (the state disk filled up) still
    applies its routines — they were armed before the write — and says so, rather than
    failing half-way: the daemon then records the new file as running, and the scheduler's
    restart after the disk failure plans from that same file, not the one before it.
    """
    state = disk / "state"
    state.mkdir()
    clock = ManualClock(start=ts("2027-01-04T12:00:00"))
    bus = EventBus(clock)
    sched = RoutineScheduler(
        company(DAILY), ScriptedSink(), state_dir=state, bus=bus, clock=clock, max_sleep=None
    )
    ctx = StandaloneContext("scheduler")
    running = asyncio.ensure_future(sched.run(ctx))
    filler: Path | None = None
    try:
        async with asyncio.timeout(30):
            await ctx.ready.wait()
            filler = fill(disk)
            result = await sched.reconfigure(company(DAILY + WEEKLY))
            assert result == {
                "added": ["weekly-note"],
                "removed": [],
                "changed": [],
                "unchanged": ["daily-post"],
            }
            # the failed write stops the scheduler until the disk takes writes again
            while DiskAlarm.of(bus).failing != {"routine history"}:
                await asyncio.sleep(0.01)
            filler.unlink()
            filler = None
            while DiskAlarm.of(bus).failing or not sched.running:
                clock.advance(DISK_RETRY_SECONDS)
                await asyncio.sleep(0.01)
        assert sched.next_fire_time("weekly-note") is not None
        assert sched.next_fire_time("daily-post") is not None
        assert {r["routine"] for r in (await sched.jobs())["routines"]} == {
            "daily-post",
            "weekly-note",
        }
    finally:
        await _stop(ctx, clock, running)
        if filler is not None:
            filler.unlink(missing_ok=True)
