"""The clocked APScheduler on its own: a broken trigger is dropped loudly, others go on."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from companyd.clock import ManualClock
from companyd.scheduler._aps import ClockedScheduler, CoalescedMiss, JobDropped

pytestmark = pytest.mark.anyio


class BreaksAfterFirst(BaseTrigger):  # type: ignore[misc]  # apscheduler 3 ships no types
    """Fires once a minute, then cannot compute its next fire time."""

    def __init__(self) -> None:
        self.calls = 0

    def get_next_fire_time(self, previous: datetime | None, now: datetime) -> datetime:
        self.calls += 1
        if previous is not None:
            raise ValueError("trigger bug")
        return now + timedelta(minutes=1)


async def test_a_broken_trigger_is_dropped_and_the_rest_keeps_firing() -> None:
    clock = ManualClock(start=datetime(2027, 1, 4, tzinfo=UTC).timestamp())
    sched = ClockedScheduler(clock, max_sleep=None, timezone="UTC")
    ran: list[tuple[str, datetime]] = []
    events: list[Any] = []

    async def job(name: str, *, scheduled: datetime | None = None) -> None:
        assert scheduled is not None
        ran.append((name, scheduled))

    sched.add_listener(events.append, EVENT_JOB_ERROR | EVENT_JOB_MISSED)
    sched.start()
    now = sched.now()
    sched.add_job(
        job,
        BreaksAfterFirst(),
        args=["broken"],
        id="broken",
        next_run_time=now + timedelta(minutes=1),
        misfire_grace_time=60,
    )
    every = IntervalTrigger(minutes=1, start_date=datetime(1970, 1, 1, tzinfo=UTC), timezone=UTC)
    sched.add_job(
        job,
        every,
        args=["fine"],
        id="fine",
        next_run_time=now + timedelta(minutes=1),
        misfire_grace_time=60,
    )
    async with asyncio.timeout(5):
        for _ in range(3):
            while sched.busy:
                await asyncio.sleep(0)
            wake = sched.next_wakeup
            assert wake is not None  # the timer survives the broken job
            clock.advance(wake)
            for _ in range(10):
                await asyncio.sleep(0)
    assert sched.get_job("broken") is None
    [dropped] = [e for e in events if isinstance(e, JobDropped)]
    assert dropped.job_id == "broken" and isinstance(dropped.exception, ValueError)
    assert [n for n, _ in ran].count("fine") == 3
    sched.shutdown(wait=False)
    await asyncio.sleep(0)


async def test_coalesced_fire_times_are_reported_not_dropped() -> None:
    clock = ManualClock(start=datetime(2027, 1, 4, tzinfo=UTC).timestamp())
    sched = ClockedScheduler(clock, max_sleep=None, timezone="UTC")
    events: list[Any] = []
    ran: list[datetime] = []

    async def job(*, scheduled: datetime | None = None) -> None:
        assert scheduled is not None
        ran.append(scheduled)

    sched.add_listener(events.append, EVENT_JOB_MISSED)
    sched.start()
    every = IntervalTrigger(minutes=1, start_date=datetime(1970, 1, 1, tzinfo=UTC), timezone=UTC)
    sched.add_job(
        job,
        every,
        id="j",
        next_run_time=sched.now() + timedelta(minutes=1),
        coalesce=True,
        misfire_grace_time=600,
    )
    async with asyncio.timeout(5):
        while sched.busy:
            await asyncio.sleep(0)
        clock.advance(5 * 60 + 1)  # five fire times pass at once
        for _ in range(10):
            await asyncio.sleep(0)
    assert [t.minute for t in ran] == [5]  # coalesced into the latest, within grace
    folded = [e.scheduled_run_time.minute for e in events if isinstance(e, CoalescedMiss)]
    assert folded == [1, 2, 3, 4]
    sched.shutdown(wait=False)
    await asyncio.sleep(0)


async def test_batch_update_keeps_the_job_store_in_order() -> None:
    # After a burst the store puts every moved job in place with one sort; the result must
    # be exactly what APScheduler's one-by-one update_job gives.
    import random

    from apscheduler.jobstores.memory import MemoryJobStore

    from companyd.scheduler._aps import BatchMemoryJobStore

    clock = ManualClock(start=datetime(2027, 1, 4, tzinfo=UTC).timestamp())
    now = datetime(2027, 1, 4, tzinfo=UTC)
    rng = random.Random(5)
    ids = [f"j{i:03d}" for i in range(100)]
    first = {j: now + timedelta(seconds=rng.choice((0, 0, 30, 60, 90))) for j in ids}
    moved_to = {j: now + timedelta(seconds=rng.choice((5, 60, 61, 120))) for j in ids}
    every = IntervalTrigger(minutes=1, start_date=datetime(1970, 1, 1, tzinfo=UTC), timezone=UTC)

    async def job(*, scheduled: datetime | None = None) -> None:
        return None

    orders = []
    for store in (BatchMemoryJobStore(), MemoryJobStore()):
        sched = ClockedScheduler(clock, max_sleep=None, timezone="UTC")
        sched.add_jobstore(store, "default")
        sched.start()
        for j in ids:
            sched.add_job(job, every, id=j, next_run_time=first[j])
        due = store.get_due_jobs(now)
        assert len(due) >= 32  # enough to take the sorting path
        for j in due:
            j._modify(next_run_time=moved_to[j.id])
        if isinstance(store, BatchMemoryJobStore):
            store.update_jobs(due)
        else:
            for j in due:
                store.update_job(j)
        orders.append([(j.id, j.next_run_time) for j in store.get_all_jobs()])
        assert store.get_next_run_time() == orders[-1][0][1]
        assert store.lookup_job("j000").next_run_time in (first["j000"], moved_to["j000"])
        sched.shutdown(wait=False)
        await asyncio.sleep(0)
    batch, plain = orders
    assert batch == plain
    assert batch == sorted(batch, key=lambda o: (o[1], o[0]))
