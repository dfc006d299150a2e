"""Claiming fires: two schedulers of one company on one routine history (issue 19: a
leader and a daemon that still believes it leads, on one PostgreSQL database; on SQLite,
two on one file) run each fire time once and record it once; a fire cancelled while its
claim commits is recorded once.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.events import Event, EventBus
from companyd.scheduler import _store as db
from companyd.scheduler._fire import STOPPED_BEFORE, Fires, Slot
from companyd.scheduler._record import Recorder
from companyd.scheduler._service import RoutineScheduler
from companyd.scheduler._sim import advance
from companyd.scheduler._store import RoutineStore
from companyd.scheduler._triggers import build_trigger, trigger_identity
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


async def test_a_fire_cancelled_while_its_claim_commits_is_recorded_once_if_it_won(
    tmp_path: Path, state_backend: Backend
) -> None:
    """The scheduler stops while a fire's claim waits for the history's worker: the claim
    still commits, and the fire it won is recorded ``cancelled`` — one row, one event —
    before the store closes; the fire's task is never handed over.
    """
    clock = ManualClock(start=1000.0)
    bus = EventBus(clock)
    events: list[Event] = []
    bus.add_listener(events.append)
    failures: list[BaseException] = []
    store = RoutineStore(tmp_path / db.DB_NAME, backend=state_backend)
    recorder = Recorder(bus=bus, clock=clock, on_store_failure=failures.append)
    sink = ScriptedSink()
    fires = Fires(sink=sink, clock=clock, recorder=recorder)
    routine = company(EVERY_TEN_MINUTES).routines["tick"]
    trigger = build_trigger(routine)
    slot = Slot(config=routine, trigger=trigger, identity=trigger_identity(trigger))
    busy = threading.Event()
    async with asyncio.timeout(30):
        await store.open()
        recorder.store = store
        state = db.RoutineState(routine="tick", trigger=slot.identity, cursor=0.0)
        await store.call(lambda c: db.put_state(c, state))
        store.post(lambda c: busy.wait(20))  # the worker is busy: the claim will wait
        fire = asyncio.ensure_future(
            fires.execute(slot, "scheduled", 1200.0, check_precondition=False)
        )
        while store.pending < 2:  # the claim is queued behind the busy batch
            await asyncio.sleep(0)
        fire.cancel()
        busy.set()
        with pytest.raises(asyncio.CancelledError):
            await fire
        await store.drain()
        rows = await store.call(lambda c: db.recent_fires(c, "tick", 10))
        cursor = await store.call(lambda c: db.load_states(c)["tick"].cursor)
        await store.close()
    assert [(r.scheduled, r.outcome, r.reason) for r in rows] == [
        (1200.0, "cancelled", STOPPED_BEFORE)
    ]
    assert cursor == 1200.0
    assert [e.data["outcome"] for e in events if e.kind == "routine_failed"] == ["cancelled"]
    assert sink.tasks == [] and failures == []


async def test_a_start_does_not_undo_a_claim_committed_after_it_read_the_history(
    tmp_path: Path, state_backend: Backend
) -> None:
    """A start writes each routine's state as it planned it from the history it read; a
    claim another scheduler of the company committed in between (a backup owed at start,
    a catch-up fire) stands: written back, the cursor it moved would let the same fire time
    be claimed, and run, a second time. A changed trigger still starts afresh.
    """
    path = tmp_path / db.DB_NAME
    stores = [RoutineStore(path, backend=state_backend) for _ in range(2)]
    async with asyncio.timeout(60):
        for store in stores:
            await store.open()
        first, other = stores
        state = db.RoutineState(routine="r", trigger="t", cursor=100.0, last_fire=100.0)
        await first.call(lambda c: db.put_state(c, state))
        read = await first.call(lambda c: db.load_states(c)["r"])  # the start reads…
        won = await other.call(
            functools.partial(db.claim_fire, routine="r", fire_time=100.001, now=5.0)
        )
        # …and writes what it planned (the cursor where it read it), then claims the same
        await first.call(lambda c: db.put_state(c, replace(read, updated=6.0), forward=True))
        again = await first.call(
            functools.partial(db.claim_fire, routine="r", fire_time=100.001, now=6.0)
        )
        after = await first.call(lambda c: db.load_states(c)["r"])
        changed = replace(read, trigger="t2", cursor=50.0, last_fire=None, updated=7.0)
        await first.call(lambda c: db.put_state(c, changed, forward=True))
        afresh = await first.call(lambda c: db.load_states(c)["r"])
        for store in stores:
            await store.close()
    assert (won, again) == (True, False)
    assert (after.cursor, after.last_fire, after.updated) == (100.001, 100.001, 6.0)
    assert (afresh.trigger, afresh.cursor, afresh.last_fire) == ("t2", 50.0, None)
