"""Edge cases found by a checker pass: DST gaps whose shifted fire time is itself a fire time,
half-hour zones, the interval grid across restarts, and reloads."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from companyd.scheduler.triggers import RoutineCronTrigger, fire_times

from .conftest import Harness, company, iso, ts

pytestmark = pytest.mark.anyio

MakeHarness = Callable[..., Harness]


def utc(text: str) -> datetime:
    return datetime.fromtimestamp(ts(text), tz=UTC)


def rows(h: Harness, routine: str) -> list[tuple[str, str]]:
    return [(iso(r.scheduled), r.outcome) for r in h.history(routine)]


def test_a_gap_time_shifted_onto_a_real_fire_time_is_one_fire_time() -> None:
    # 02:30 does not exist on 29 Mar 2026 in Berlin and becomes 03:30 CEST, which is also
    # the routine's 03:30 fire time: one instant, so one fire time, not two.
    trigger = RoutineCronTrigger("30 2-3 * * *", "Europe/Berlin")
    got = [
        iso(t.timestamp())
        for t in fire_times(trigger, utc("2026-03-28T12:00"), utc("2026-03-30T00:00"))
    ]
    assert got == ["2026-03-29T01:30:00+00:00"]
    # And APScheduler's own walk, asked exactly at the fire time (a clock that is on time).
    first = trigger.get_next_fire_time(None, utc("2026-03-29T00:00"))
    assert first is not None and iso(first.timestamp()) == "2026-03-29T01:30:00+00:00"
    again = trigger.get_next_fire_time(first, first.astimezone(UTC))
    assert again is not None and iso(again.timestamp()) == "2026-03-30T00:30:00+00:00"


async def test_spring_forward_gap_onto_a_fire_time_runs_once_with_no_missed_row(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            """\
            night: {assignee: coo, description: Nightly., trigger: {cron: "30 2-3 * * *"}}
            """,
            timezone="Europe/Berlin",
        ),
        start="2026-03-28T12:00:00",
    )
    await h.start()
    await h.advance_to("2026-03-29T12:00:00")
    assert rows(h, "night") == [("2026-03-29T01:30:00+00:00", "ok")]
    assert len(h.sink.tasks) == 1
    assert h.kinds("routine_missed") == []


async def test_down_across_a_shifted_gap_fire_time_records_it_once(
    make_harness: MakeHarness,
) -> None:
    routines = """\
        night:
          assignee: coo
          description: Nightly.
          trigger: {cron: "30 2-3 * * *"}
          catch_up: {policy: skip}
        """
    h = make_harness(company(routines, timezone="Europe/Berlin"), start="2026-03-29T00:00:00")
    await h.start()
    await h.stop()
    h.clock.advance(ts("2026-03-29T01:45:00") - h.clock.time())
    await h.start()
    assert rows(h, "night") == [("2026-03-29T01:30:00+00:00", "missed")]
