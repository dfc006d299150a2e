"""A backup routine's backup that did not happen is taken at the next start, once.

A routine's fire is at-most-once (docs/scheduler.md, "Restarts and catch-up"); a backup
routine's is not held to that: a backup is idempotent and calls no model, so the fire the
daemon's stop came under, the one a crash cut short and the one that fell while the daemon
was down are taken again right away at the next start — one ``catch_up`` fire whose reason
says why — whatever ``catch_up`` says. (The scheduler on a manual clock, a real
routines.sqlite, a BackupSink that writes real files.)
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from companyd.events import EventBus
from companyd.scheduler import _store as db
from companyd.scheduler._records import FireRecord
from companyd.scheduler._service import RoutineScheduler

from .conftest import Harness, ScriptedBackups, company, iso, ts

pytestmark = pytest.mark.anyio

MakeHarness = Callable[..., Harness]


def nightly(to: Path, catch_up: str = "skip") -> str:
    return f"nightly: {{backup: {{every: 1d, keep: 14, to: {to}}}, catch_up: {catch_up}}}\n"


def fires(h: Harness) -> list[tuple[str, str, str | None]]:
    return [(iso(r.scheduled)[:19], r.kind, r.outcome) for r in h.history("nightly")]


async def start(h: Harness, backups: ScriptedBackups) -> RoutineScheduler:
    return await h.start(backups=backups)


async def stop_during_the_backup(h: Harness, backups: ScriptedBackups) -> None:
    """Start before the nightly backup, reach it with the backup held, and stop on purpose
    while it runs (the deploy's restart at the backup's hour).
    """
    backups.hold = True
    sched = await start(h, backups)
    await h.advance_to("2027-01-05T00:00:00", runs=False)
    async with asyncio.timeout(5):
        await backups.entered.wait()
    sched.planned_stop("SIGTERM")
    async with asyncio.timeout(5):
        await sched.stop(drain=False)
    backups.hold = False
    backups.gate.set()


async def test_the_backup_the_stop_came_under_is_taken_at_start_once(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    dest = tmp_path / "backups"
    h = make_harness(company(nightly(dest)), start="2027-01-04T23:00:00")
    backups = ScriptedBackups()
    await stop_during_the_backup(h, backups)
    assert backups.written == []
    [cancelled] = h.history("nightly")
    assert cancelled.outcome == "cancelled"
    assert "nothing was written; it is taken again when the daemon starts" in (
        cancelled.reason or ""
    ), cancelled.reason
    [alert] = h.kinds("routine_failed")  # the cancelled fire's one alert, as before

    h.clock.advance(60)  # the restart, a minute later
    await start(h, backups)
    assert [p.name for p in dest.iterdir()] == ["backup-1.tar.gz"]
    assert fires(h) == [
        ("2027-01-05T00:00:00", "scheduled", "cancelled"),
        ("2027-01-05T00:00:00", "catch_up", "ok"),
    ]
    retake = h.history("nightly")[-1]
    assert retake.fired == ts("2027-01-05T00:01:00")
    assert "backup written" in (retake.reason or "")
    assert (
        "the backup of 2027-01-05 00:00:00 UTC was interrupted by the stop; taken again at start"
        in (retake.reason or "")
    ), retake.reason
    assert h.kinds("routine_failed") == [alert]

    # an ok backup is not taken again: another restart takes none, the next night's is due
    await h.stop()
    h.clock.advance(60)
    await start(h, backups)
    assert len(backups.written) == 1
    await h.advance_to("2027-01-06T00:00:01")
    assert len(backups.written) == 2
    assert fires(h)[-1] == ("2027-01-06T00:00:00", "scheduled", "ok")


@pytest.mark.parametrize("row", [True, False], ids=["open-row", "cursor-ahead"])
async def test_the_backup_a_crash_cut_short_is_taken_at_start_once(
    make_harness: MakeHarness, tmp_path: Path, row: bool
) -> None:
    """The process died during the backup: its row was left open (``row``), or it died
    between the claim and the row (the cursor ahead of the history). The start closes it
    ``cancelled`` saying the backup is taken again, and takes it.
    """
    dest = tmp_path / "backups"
    h = make_harness(company(nightly(dest)), start="2027-01-04T23:00:00")
    backups = ScriptedBackups()
    await start(h, backups)
    await h.stop()
    conn = sqlite3.connect(h.state_dir / db.DB_NAME)
    try:
        with conn:  # what the dead process left behind
            t = ts("2027-01-05T00:00:00")
            conn.execute(
                "UPDATE routine_state SET cursor = ?, last_fire = ? WHERE routine = 'nightly'",
                (t, t),
            )
            if row:
                open_fire = FireRecord(
                    fire_id="fire-dead",
                    routine="nightly",
                    agent="(backup)",
                    kind="scheduled",
                    scheduled=t,
                    fired=t,
                )
                db.insert_fires(conn, [open_fire])
    finally:
        conn.close()
    h.clock.advance(3600 + 120)  # 00:02, no clean-stop marker: a crash
    await start(h, backups)
    assert len(backups.written) == 1
    assert fires(h) == [
        ("2027-01-05T00:00:00", "scheduled", "cancelled"),
        ("2027-01-05T00:00:00", "catch_up", "ok"),
    ]
    closed, retake = h.history("nightly")
    assert "it is taken again at start" in (closed.reason or ""), closed.reason
    assert "not run again" not in (closed.reason or "")
    assert (
        "the backup of 2027-01-05 00:00:00 UTC was interrupted by a crash of the daemon; "
        "taken again at start" in (retake.reason or "")
    ), retake.reason
    await h.stop()
    h.clock.advance(60)
    await start(h, backups)
    assert len(backups.written) == 1


@pytest.mark.parametrize("planned", [False, True], ids=["down", "stopped-on-purpose"])
async def test_the_latest_backup_missed_while_down_is_taken_at_start_whatever_catch_up_says(
    make_harness: MakeHarness, tmp_path: Path, planned: bool
) -> None:
    """Down over two nightly backups with ``catch_up: skip``: the older is recorded as
    before (``missed``, or ``stopped`` after a planned stop), the latest is taken at start.
    """
    dest = tmp_path / "backups"
    h = make_harness(company(nightly(dest)), start="2027-01-04T23:00:00")
    backups = ScriptedBackups()
    sched = await start(h, backups)
    if planned:
        sched.planned_stop("SIGTERM")
    await h.stop()
    h.clock.advance(2 * 86400)  # back at 2027-01-06T23:00
    await start(h, backups)
    assert len(backups.written) == 1
    older = "stopped" if planned else "missed"
    assert fires(h) == [
        ("2027-01-05T00:00:00", "scheduled", older),
        ("2027-01-06T00:00:00", "catch_up", "ok"),
    ]
    retake = h.history("nightly")[-1]
    why = "fell while the daemon was stopped on purpose" if planned else "was missed"
    assert f"the backup of 2027-01-06 00:00:00 UTC {why}" in (retake.reason or ""), retake.reason
    assert "taken at start" in (retake.reason or "")
    await h.stop()
    h.clock.advance(60)
    await start(h, backups)
    assert len(backups.written) == 1


async def test_two_schedulers_on_one_history_take_the_owed_backup_once(
    make_harness: MakeHarness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """High availability (docs/ha.md): two schedulers start on one history and both find
    the backup owed; both try to take it at once: the claim lets one of them take it.
    """
    dest = tmp_path / "backups"
    h = make_harness(company(nightly(dest)), start="2027-01-04T23:00:00")
    backups = ScriptedBackups()
    await stop_during_the_backup(h, backups)
    h.clock.advance(60)
    scheds = [
        RoutineScheduler(
            h.config,
            h.sink,
            state_dir=h.state_dir,
            bus=EventBus(h.clock),
            clock=h.clock,
            max_sleep=None,
            backups=backups,
        )
        for _ in range(2)
    ]
    try:
        async with asyncio.timeout(10):
            for s in scheds:
                await s.start()
            for s in scheds:
                s.take_owed_backups()
            for s in scheds:
                await s.settle()
    finally:
        for s in scheds:
            await s.stop()
    assert len(backups.written) == 1
    assert [f[1:] for f in fires(h)] == [("scheduled", "cancelled"), ("catch_up", "ok")]
    lost = [r for r in caplog.records if "already claimed it" in r.getMessage()]
    assert len(lost) == 1, [r.getMessage() for r in caplog.records]
