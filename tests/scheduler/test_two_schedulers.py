"""Two schedulers of one company on one routine history (issue 19: a leader and a daemon
that still believes it leads, on one PostgreSQL database; on SQLite, two on one file):
each fire time is run by exactly one of them and recorded once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.scheduler import store as db
from companyd.scheduler.service import RoutineScheduler
from companyd.scheduler.sim import advance
from companyd.storage import Backend

from .conftest import ScriptedSink, company, ts

pytestmark = pytest.mark.anyio

EVERY_TEN_MINUTES = """\
tick:
  assignee: coo
  description: Check the queue.
  trigger: {every: 10m}
"""


async def test_two_schedulers_on_one_history_run_each_fire_time_once(
    tmp_path: Path, state_backend: Backend
) -> None:
    clock = ManualClock(start=ts("2027-01-04T00:00:00"))
    cfg = company(EVERY_TEN_MINUTES)
    sinks = [ScriptedSink(), ScriptedSink()]
    scheds = [
        RoutineScheduler(
            cfg,
            sink,
            state_dir=tmp_path / "state",  # on SQLite one file; on postgres no file at all
            bus=EventBus(clock),
            clock=clock,
            max_sleep=None,
            backend=state_backend,
        )
        for sink in sinks
    ]
    async with asyncio.timeout(60):
        for sched in scheds:
            await sched.start()
        try:
            # Both wake at every fire time on the shared clock and claim it at once.
            for _ in range(12):
                await advance(scheds[0], clock, 600)
                await scheds[1].settle()
        finally:
            for sched in scheds:
                await sched.stop()
    fires = db.read_history(
        scheds[0].db_path, lambda c: db.recent_fires(c, "tick", 100), backend=state_backend
    )
    assert fires is not None
    expected = [ts("2027-01-04T00:10:00") + 600 * i for i in range(12)]
    assert sum(len(sink.tasks) for sink in sinks) == len(expected)  # each run once
    assert sorted(f.scheduled for f in fires) == expected  # and recorded once
    assert {f.outcome for f in fires} == {"ok"}
    assert (tmp_path / "state" / db.DB_NAME).exists() == (state_backend.kind == "sqlite")
