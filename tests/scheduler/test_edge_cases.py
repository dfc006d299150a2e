"""Edge cases found by a checker pass: DST gaps whose shifted fire time is itself a fire time,
half-hour zones, the interval grid across restarts, and reloads.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from companyd.scheduler._triggers import RoutineCronTrigger, fire_times

from .conftest import Harness, company, iso, ts

pytestmark = pytest.mark.anyio

MakeHarness = Callable[..., Harness]


def utc(text: str) -> datetime:
    return datetime.fromtimestamp(ts(text), tz=UTC)


def rows(h: Harness, routine: str) -> list[tuple[str, str | None]]:
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


async def test_removed_then_re_added_by_reload_owes_nothing_for_the_time_it_was_gone(
    make_harness: MakeHarness,
) -> None:
    hourly = """\
        beat:
          assignee: coo
          description: Beat.
          trigger: {every: 1h}
          catch_up: {policy: run_once, grace: 6h}
        other: {assignee: coo, description: Other., trigger: {every: 1d}}
        """
    without = "other: {assignee: coo, description: Other., trigger: {every: 1d}}\n"
    h = make_harness(company(hourly), start="2027-01-04T12:30:00")
    sched = await h.start()
    await h.advance_to("2027-01-04T13:30:00")
    assert await sched.reconfigure(company(without)) == {
        "added": [],
        "removed": ["beat"],
        "changed": [],
        "unchanged": ["other"],
    }
    await h.advance_to("2027-01-04T16:30:00")
    result = await sched.reconfigure(company(hourly))
    assert result["added"] == ["beat"]
    await h.advance_to("2027-01-04T17:30:00")
    assert rows(h, "beat") == [
        ("2027-01-04T13:00:00+00:00", "ok"),
        ("2027-01-04T17:00:00+00:00", "ok"),
    ]
    # And a restart right after owes nothing either (14:00–16:00 were not its fire times).
    await h.stop()
    h.clock.advance(60)
    await h.start()
    assert [r for r in rows(h, "beat") if r[1] != "ok"] == []
    assert h.kinds("routine_missed") == []


async def test_a_schedule_changed_by_reload_then_a_restart_owes_only_the_new_fire_times(
    make_harness: MakeHarness,
) -> None:
    def daily(cron: str) -> str:
        return f"""\
            post:
              assignee: coo
              description: Post.
              trigger: {{cron: "{cron}"}}
              catch_up: {{policy: run_once, grace: 12h}}
            """

    h = make_harness(company(daily("0 9 * * *")), start="2027-01-04T08:00:00")
    sched = await h.start()
    # Moved from 09:00 to 10:00 at 08:30; the daemon dies at 08:45 and is back at 11:00.
    await h.advance_to("2027-01-04T08:30:00")
    assert (await sched.reconfigure(company(daily("0 10 * * *"))))["changed"] == ["post"]
    await h.advance_to("2027-01-04T08:45:00")
    await h.stop()
    h.clock.advance(ts("2027-01-04T11:00:00") - h.clock.time())
    await h.start(company(daily("0 10 * * *")))
    await h.advance_to("2027-01-04T11:30:00")
    got = [(iso(r.scheduled), r.kind, r.outcome) for r in h.history("post")]
    assert got == [("2027-01-04T10:00:00+00:00", "catch_up", "ok")]


@pytest.mark.parametrize(
    ("zone", "expr", "expected"),
    [
        # 02:30 Berlin does not exist on 29 Mar 2026 and runs at 03:30 CEST (01:30 UTC), also
        # when an earlier fire time of the same night comes first (APScheduler lost it)
        ("Europe/Berlin", "30 1,2 * * *", ["2026-03-29T00:30", "2026-03-29T01:30"]),
        ("Europe/Berlin", "0,30 2 * * *", ["2026-03-29T01:00", "2026-03-29T01:30"]),
        (
            "Europe/Berlin",
            "15 1-4 * * *",
            ["2026-03-29T00:15", "2026-03-29T01:15", "2026-03-29T02:15"],
        ),
        # Lord Howe's gap is 30 minutes (02:00 → 02:30 on 4 Oct 2026): 02:15 runs at 02:45
        (
            "Australia/Lord_Howe",
            "15 1-4 * * *",
            ["2026-10-03T14:45", "2026-10-03T15:45", "2026-10-03T16:15", "2026-10-03T17:15"],
        ),
    ],
)
def test_a_gap_time_after_an_earlier_fire_time_of_the_night_still_fires(
    zone: str, expr: str, expected: list[str]
) -> None:
    trigger = RoutineCronTrigger(expr, zone)
    day = "2026-03-29" if zone == "Europe/Berlin" else "2026-10-04"
    tz = ZoneInfo(zone)
    start = datetime.fromisoformat(f"{day}T00:00").replace(tzinfo=tz) - timedelta(hours=1)
    until = datetime.fromisoformat(f"{day}T05:00").replace(tzinfo=tz)
    got = [t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M") for t in fire_times(trigger, start, until)]
    assert got == expected


async def test_a_gap_fire_time_after_an_earlier_one_runs_through_the_scheduler(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            """\
            night: {assignee: coo, description: Nightly., trigger: {cron: "30 1,2 * * *"}}
            """,
            timezone="Europe/Berlin",
        ),
        start="2026-03-28T12:00:00",
    )
    await h.start()
    await h.advance_to("2026-03-29T12:00:00")
    assert rows(h, "night") == [
        ("2026-03-29T00:30:00+00:00", "ok"),
        ("2026-03-29T01:30:00+00:00", "ok"),
    ]
    assert h.kinds("routine_missed") == []
