"""The RoutineScheduler on a ManualClock: real APScheduler, real SQLite, real events."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from companyd.runs import RunOutcome, RunStatus
from companyd.scheduler._service import RoutineBusy, RoutineNotFound
from companyd.supervision._child import StandaloneContext

from .conftest import Harness, company, iso, ts

pytestmark = pytest.mark.anyio

MakeHarness = Callable[..., Harness]

DAILY_1400 = """\
daily-post:
  assignee: marketing
  description: Draft today's post.
  expected_output: Under 280 characters.
  reviewer: ceo
  trigger: {cron: "0 14 * * *", timezone: UTC}
  catch_up: {policy: run_once, grace: 2h}
"""


def scheduled(h: Harness, routine: str) -> list[str]:
    return [iso(r.scheduled) for r in h.history(routine)]


async def test_cron_with_time_zone_fires_at_local_time_and_submits_the_task(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            """\
            standup:
              assignee: coo
              description: Run the stand-up.
              expected_output: Three bullet points.
              reviewer: ceo
              trigger: {cron: "0 9 * * mon-fri", timezone: America/New_York}
            """
        ),
        start="2027-01-08T00:00:00",  # a Friday
    )
    await h.start(max_sleep=3600.0)  # also exercises the capped sleep
    await h.advance_to("2027-01-12T00:00:00")
    # Fri 09:00 EST = 14:00 UTC; the weekend is skipped; Mon 11th.
    assert scheduled(h, "standup") == ["2027-01-08T14:00:00+00:00", "2027-01-11T14:00:00+00:00"]
    rows = h.history("standup")
    assert [r.outcome for r in rows] == ["ok", "ok"]
    assert all(r.fired == r.scheduled for r in rows)  # on time, to the microsecond
    assert all(r.run_id and r.task_id and r.cost_usd == 0.01 for r in rows)
    task = h.sink.tasks[0]
    assert task.agent == "coo"
    assert task.prompt == "Run the stand-up."
    assert task.source == "routine:standup"
    assert task.routine == "standup"
    assert task.expected_output == "Three bullet points."
    assert task.reviewer == "ceo"
    nxt = h.sched.next_fire_time("standup") if h.sched else None
    assert nxt is not None
    assert nxt.astimezone(ZoneInfo("America/New_York")).strftime("%a %d %H:%M") == "Tue 12 09:00"


async def test_spring_forward_day_runs_once_at_0330_cest(make_harness: MakeHarness) -> None:
    h = make_harness(
        company(
            """\
            night: {assignee: coo, description: Nightly., trigger: {cron: "30 2 * * *"}}
            """,
            timezone="Europe/Berlin",
        ),
        start="2026-03-27T12:00:00",
    )
    await h.start()
    await h.advance_to("2026-03-30T12:00:00")
    got = scheduled(h, "night")
    assert got == [
        "2026-03-28T01:30:00+00:00",
        "2026-03-29T01:30:00+00:00",
        "2026-03-30T00:30:00+00:00",
    ]
    berlin = [datetime.fromtimestamp(ts(t), tz=ZoneInfo("Europe/Berlin")) for t in got]
    assert [b.strftime("%d %H:%M %Z") for b in berlin] == [
        "28 02:30 CET",
        "29 03:30 CEST",
        "30 02:30 CEST",
    ]
    assert len(h.sink.tasks) == 3


async def test_fall_back_day_runs_once_not_twice(make_harness: MakeHarness) -> None:
    h = make_harness(
        company(
            """\
            night: {assignee: coo, description: Nightly., trigger: {cron: "30 2 * * *"}}
            half-hourly: {assignee: coo, description: Tick., trigger: {cron: "*/30 * * * *"}}
            """,
            timezone="Europe/Berlin",
        ),
        start="2026-10-24T12:00:00",
    )
    await h.start()
    await h.advance_to("2026-10-26T12:00:00")
    assert scheduled(h, "night") == [
        "2026-10-25T00:30:00+00:00",  # 02:30 CEST — the only run on the switch day
        "2026-10-26T01:30:00+00:00",
    ]
    ticks = [t for t in scheduled(h, "half-hourly") if "2026-10-25T00" <= t < "2026-10-25T02"]
    assert len(ticks) == 4  # the wildcard routine keeps every real half hour
    assert h.kinds("routine_missed", "routine_failed", "routine_skipped") == []


async def test_catch_up_run_once_runs_the_1400_fire_once_at_start(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(company(DAILY_1400), start="2027-01-04T12:00:00")
    await h.start()
    await h.advance_to("2027-01-04T13:55:00")
    await h.stop()  # daemon down 13:55–14:10
    h.clock.advance(15 * 60)
    await h.start()
    assert len(h.sink.tasks) == 1
    rows = h.history("daily-post")
    assert [(iso(r.scheduled), r.kind, r.outcome) for r in rows] == [
        ("2027-01-04T14:00:00+00:00", "catch_up", "ok")
    ]
    assert rows[0].fired == ts("2027-01-04T14:10:00")
    assert h.kinds("routine_missed") == []
    # The schedule goes on: one run tomorrow, not another catch-up.
    await h.advance_to("2027-01-05T14:30:00")
    assert scheduled(h, "daily-post") == [
        "2027-01-04T14:00:00+00:00",
        "2027-01-05T14:00:00+00:00",
    ]
    assert len(h.sink.tasks) == 2


async def test_catch_up_skip_records_the_1400_fire_as_missed(make_harness: MakeHarness) -> None:
    h = make_harness(
        company(DAILY_1400.replace("{policy: run_once, grace: 2h}", "skip")),
        start="2027-01-04T12:00:00",
    )
    await h.start()
    await h.advance_to("2027-01-04T13:55:00")
    await h.stop()
    h.clock.advance(15 * 60)
    await h.start()
    assert h.sink.tasks == []
    rows = h.history("daily-post")
    assert [(iso(r.scheduled), r.outcome) for r in rows] == [
        ("2027-01-04T14:00:00+00:00", "missed")
    ]
    assert rows[0].reason is not None and "daemon was down" in rows[0].reason
    [event] = h.kinds("routine_missed")
    assert event.data["routine"] == "daily-post"
    assert event.data["agent"] == "marketing"
    assert event.data["scheduled"] == "2027-01-04T14:00:00+00:00"
    assert "daemon was down" in event.data["reason"]
    assert event.data["run_id"] is None
    assert event.data["count"] == 1
    nxt = h.sched.next_fire_time("daily-post") if h.sched else None
    assert nxt is not None and iso(nxt.timestamp()) == "2027-01-05T14:00:00+00:00"


async def test_a_planned_stop_is_not_a_miss_but_an_unplanned_one_is(
    make_harness: MakeHarness,
) -> None:
    """Issue 15 item 16: a fire time that falls while the daemon was stopped on purpose
    (SIGTERM, ``systemctl restart``) with ``catch_up: skip`` is ``stopped`` — skipped
    because the daemon was stopped: no warning, not a due run. Without the clean-stop
    marker (a crash, kill -9) it stays ``missed``.
    """
    import sqlite3

    from companyd.events import Severity
    from companyd.scheduler._store import DB_NAME, routine_stats

    h = make_harness(
        company(DAILY_1400.replace("{policy: run_once, grace: 2h}", "skip")),
        start="2027-01-04T12:00:00",
    )
    sched = await h.start()
    await h.advance_to("2027-01-04T13:55:00")
    sched.planned_stop("SIGTERM")
    await h.stop()
    h.clock.advance(15 * 60)
    await h.start()
    assert h.sink.tasks == []
    rows = h.history("daily-post")
    assert [(iso(r.scheduled), r.outcome) for r in rows] == [
        ("2027-01-04T14:00:00+00:00", "stopped")
    ]
    assert "daemon was stopped" in (rows[0].reason or "")
    assert h.kinds("routine_missed") == []
    warnings = [e for e in h.events if e.source.endswith("scheduler") or "routine" in e.kind]
    assert [e for e in warnings if e.severity.rank >= Severity.WARNING.rank] == []
    conn = sqlite3.connect(h.state_dir / DB_NAME)
    try:
        assert "daily-post" not in routine_stats(conn, 0.0)  # not a due run
    finally:
        conn.close()

    # The next day the process dies without a planned stop: the fire time is missed.
    await h.advance_to("2027-01-05T13:55:00")
    await h.stop()
    h.clock.advance(15 * 60)
    await h.start()
    rows = h.history("daily-post")
    assert [(iso(r.scheduled), r.outcome) for r in rows] == [
        ("2027-01-04T14:00:00+00:00", "stopped"),
        ("2027-01-05T14:00:00+00:00", "missed"),
    ]
    [missed] = h.kinds("routine_missed")
    assert missed.data["scheduled"] == "2027-01-05T14:00:00+00:00"


async def test_after_a_planned_stop_run_once_serves_the_latest_and_the_rest_are_stopped(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            "tick: {assignee: coo, description: Tick., trigger: {every: 1h}, "
            "catch_up: {policy: run_once, grace: 2h}}\n"
        ),
        start="2027-01-04T11:30:00",
    )
    sched = await h.start()
    sched.planned_stop("SIGTERM")
    await h.stop()
    h.clock.advance(3 * 3600)  # 12:00, 13:00 and 14:00 pass while stopped
    await h.start()
    rows = h.history("tick")
    assert [(iso(r.scheduled), r.outcome, r.kind) for r in rows] == [
        ("2027-01-04T12:00:00+00:00", "stopped", "scheduled"),
        ("2027-01-04T13:00:00+00:00", "stopped", "scheduled"),
        ("2027-01-04T14:00:00+00:00", "ok", "catch_up"),
    ]
    assert h.kinds("routine_missed") == []


async def test_catch_up_run_once_beyond_grace_is_missed_with_the_reason(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(company(DAILY_1400), start="2027-01-04T12:00:00")
    await h.start()
    await h.advance_to("2027-01-04T13:55:00")
    await h.stop()
    h.clock.advance(2.5 * 3600)  # up at 16:25: 14:00 is 2h25m old, grace 2h
    await h.start()
    assert h.sink.tasks == []
    [row] = h.history("daily-post")
    assert row.outcome == "missed"
    assert row.reason is not None and "beyond the catch-up grace of 2h" in row.reason
    assert "2h25m" in row.reason


async def test_every_missed_fire_time_while_down_has_a_row_and_one_event(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            """\
            heartbeat: {assignee: coo, description: Look., trigger: {every: 5m}, catch_up: skip}
            """
        ),
        start="2027-01-04T12:00:00",
    )
    await h.start()
    await h.advance_to("2027-01-04T12:07:00")
    await h.stop()
    h.clock.advance(3600)  # down 12:07–13:07: 12:10 … 13:05 missed
    await h.start()
    rows = h.history("heartbeat")
    missed = [r for r in rows if r.outcome == "missed"]
    assert len(missed) == 12
    assert iso(missed[0].scheduled) == "2027-01-04T12:10:00+00:00"
    assert iso(missed[-1].scheduled) == "2027-01-04T13:05:00+00:00"
    [event] = h.kinds("routine_missed")
    assert event.data["count"] == 12
    assert event.data["first"] == "2027-01-04T12:10:00+00:00"


async def test_a_long_outage_is_summarised_but_fully_counted(make_harness: MakeHarness) -> None:
    h = make_harness(
        company(
            """\
            tick: {assignee: coo, description: Tick., trigger: {every: 1m}, catch_up: skip}
            """
        ),
        start="2027-01-04T12:00:00",
    )
    await h.start()
    await h.stop()
    h.clock.advance(3 * 3600 + 30)
    await h.start()
    rows = h.history("tick")
    assert len(rows) == 101  # 100 newest one by one, the 80 before in one row
    assert sum(r.fires for r in rows) == 180
    assert rows[0].fires == 80 and "stands for 80 fire times" in (rows[0].reason or "")


async def test_a_trigger_changed_while_down_starts_afresh(make_harness: MakeHarness) -> None:
    h = make_harness(company(DAILY_1400), start="2027-01-04T12:00:00")
    await h.start()
    await h.advance_to("2027-01-04T13:55:00")
    await h.stop()
    h.clock.advance(15 * 60)
    await h.start(company(DAILY_1400.replace("0 14 * * *", "0 15 * * *")))
    assert h.sink.tasks == []
    assert h.history("daily-post") == []  # 14:00 is not owed under the new schedule
    nxt = h.sched.next_fire_time("daily-post") if h.sched else None
    assert nxt is not None and iso(nxt.timestamp()) == "2027-01-04T15:00:00+00:00"


async def test_skip_if_active_records_the_overlapping_fire_as_skipped(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company("slow: {assignee: coo, description: Slow., trigger: {every: 1m}}\n"),
        start="2027-01-04T12:00:30",
    )
    h.sink.hold = True
    await h.start()
    await h.advance_to("2027-01-04T12:01:00", runs=False)
    assert h.sink.active == 1
    await h.advance_to("2027-01-04T12:03:00", runs=False)  # 12:02 and 12:03 overlap
    rows = h.history("slow")
    assert [(iso(r.scheduled)[11:16], r.outcome) for r in rows] == [
        ("12:01", None),
        ("12:02", "skipped"),
        ("12:03", "skipped"),
    ]
    assert "still active" in (rows[1].reason or "")
    skipped = h.kinds("routine_skipped")
    assert [e.data["scheduled"] for e in skipped] == [
        "2027-01-04T12:02:00+00:00",
        "2027-01-04T12:03:00+00:00",
    ]
    h.sink.gate.set()
    await h.advance(0)
    assert h.history("slow")[0].outcome == "ok"
    assert len(h.sink.tasks) == 1 and h.sink.max_active == 1


async def test_queue_keeps_at_most_one_run_waiting(make_harness: MakeHarness) -> None:
    h = make_harness(
        company(
            "slow: {assignee: coo, description: Slow., trigger: {every: 1m}, concurrency: queue}\n"
        ),
        start="2027-01-04T12:00:30",
    )
    h.sink.hold = True
    await h.start()
    await h.advance_to("2027-01-04T12:03:00", runs=False)
    rows = h.history("slow")
    assert [(iso(r.scheduled)[11:16], r.outcome, r.started is None) for r in rows] == [
        ("12:01", None, False),  # running
        ("12:02", None, True),  # waiting its turn
        ("12:03", "skipped", True),  # no second place in the queue
    ]
    assert "queue full" in (rows[2].reason or "")
    assert h.sink.active == 1
    h.sink.gate.set()
    await h.advance(0)
    rows = h.history("slow")
    assert [r.outcome for r in rows] == ["ok", "ok", "skipped"]
    assert len(h.sink.tasks) == 2 and h.sink.max_active == 1  # queued, never overlapping
    assert rows[1].started is not None and rows[0].ended is not None
    assert rows[1].started >= rows[0].ended


async def test_memory_changed_precondition_makes_no_call_when_nothing_changed(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            """\
            heartbeat:
              assignee: coo
              description: Look at what changed.
              trigger: {every: 5m}
              precondition: memory_changed
            """
        ),
        start="2027-01-04T12:00:00",
    )
    await h.start()
    await h.advance_to("2027-01-04T13:00:00")
    assert h.sink.tasks == []  # twelve fires, not one submit
    rows = h.history("heartbeat")
    assert len(rows) == 12
    assert {r.outcome for r in rows} == {"idle"}
    assert sum(r.cost_usd for r in rows) == 0
    assert all("no changes" in (r.reason or "") for r in rows)
    assert h.kinds("routine_failed", "routine_missed", "routine_skipped") == []
    h.sink.memory += 1  # someone wrote to memory
    await h.advance_to("2027-01-04T13:15:00")
    assert len(h.sink.tasks) == 1  # one run for the change, then idle again
    assert [r.outcome for r in h.history("heartbeat")[-3:]] == ["ok", "idle", "idle"]


async def test_inbox_nonempty_precondition(make_harness: MakeHarness) -> None:
    h = make_harness(
        company(
            """\
            triage:
              assignee: coo
              description: Work the inbox.
              trigger: {every: 10m}
              precondition: inbox_nonempty
            """
        ),
        start="2027-01-04T12:00:00",
    )
    await h.start()
    await h.advance_to("2027-01-04T12:10:00")
    assert h.sink.tasks == []
    assert "inbox of 'coo' is empty" in (h.history("triage")[0].reason or "")
    h.sink.inbox["coo"] = 2
    await h.advance_to("2027-01-04T12:20:00")
    assert len(h.sink.tasks) == 1


async def test_run_outcomes_and_their_events(make_harness: MakeHarness) -> None:
    h = make_harness(
        company(
            """\
            broke: {assignee: coo, description: A., trigger: {cron: "0 9 * * *"}}
            closed: {assignee: marketing, description: B., trigger: {cron: "0 9 * * *"}}
            mute: {assignee: coo, description: C., trigger: {cron: "0 9 * * *"}}
            """
        ),
        start="2027-01-04T08:00:00",
    )
    h.sink.script["broke"] = lambda t: (RunStatus.BUDGET_EXHAUSTED, "daily budget $5 spent", 0.0)
    h.sink.script["mute"] = lambda t: (RunStatus.FAILED, None, 0.02)
    h.sink.raise_for.add("closed")
    await h.start()
    await h.advance_to("2027-01-04T09:00:00")
    [broke] = h.history("broke")
    assert (broke.outcome, broke.reason) == ("budget_exhausted", "daily budget $5 spent")
    [closed] = h.history("closed")
    assert closed.outcome == "failed"
    assert "could not be handed to agent 'marketing'" in (closed.reason or "")
    assert "ConnectionError" in (closed.reason or "")
    [mute] = h.history("mute")
    assert mute.outcome == "failed" and mute.reason and "gave no reason" in mute.reason
    assert mute.cost_usd == 0.02
    events = {e.data["routine"]: e for e in h.kinds("routine_failed")}
    assert set(events) == {"broke", "closed", "mute"}
    assert events["broke"].data["outcome"] == "budget_exhausted"
    assert events["broke"].data["run_id"] == broke.run_id
    assert events["broke"].data["scheduled"] == "2027-01-04T09:00:00+00:00"
    assert events["broke"].data["agent"] == "coo"
    assert events["broke"].source == "scheduler"


async def test_a_late_wakeup_is_a_recorded_misfire_not_a_silent_skip(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            """\
            hourly-skip: {assignee: coo, description: A., trigger: {every: 1h}, catch_up: skip}
            hourly-once:
              assignee: coo
              description: B.
              trigger: {every: 1h}
              catch_up: {policy: run_once, grace: 30m}
            """
        ),
        start="2027-01-04T12:00:00",
    )
    await h.start()
    # The host sleeps: the clock jumps 3h05m with no chance to wake in between.
    h.clock.advance(3 * 3600 + 300)
    assert h.sched is not None
    async with asyncio.timeout(10):
        await h.sched.settle()
    skip = h.history("hourly-skip")
    assert [r.outcome for r in skip] == ["missed", "missed", "missed"]
    assert all("misfire" in (r.reason or "") for r in skip)
    assert "beyond the grace of 1m" in (skip[2].reason or "")
    assert "folded" in (skip[0].reason or "")
    once = h.history("hourly-once")
    assert [r.outcome for r in once] == ["missed", "missed", "ok"]  # 5 min late < 30 min grace
    assert len(h.kinds("routine_missed")) == 5
    assert len(h.sink.tasks) == 1


async def test_reconfigure_leaves_untouched_routines_alone(make_harness: MakeHarness) -> None:
    base = """\
    keep: {assignee: coo, description: Keep me., trigger: {every: 1h}}
    move: {assignee: coo, description: Move me., trigger: {cron: "0 14 * * *"}}
    drop: {assignee: coo, description: Drop me., trigger: {cron: "0 16 * * *"}}
    same: {assignee: coo, description: Same., trigger: {cron: "0 3 * * *"}}
    gate: {assignee: coo, description: Gate., trigger: {cron: "0 4 * * *"}}
    """
    h = make_harness(company(base), start="2027-01-04T12:30:00")
    sched = await h.start()
    keep_next = sched.next_fire_time("keep")
    gate_next = sched.next_fire_time("gate")
    new = company(
        """\
        keep: {assignee: marketing, description: "Keep me, changed.", trigger: {every: 1h}}
        move: {assignee: coo, description: Move me., trigger: {cron: "0 15 * * *"}}
        add: {assignee: coo, description: New., trigger: {cron: "45 12 * * *"}}
        same: {assignee: coo, description: Same., trigger: {cron: "0 3 * * *"}}
        gate: {assignee: coo, description: Gate., trigger: {cron: "0 4 * * *"}, approval: required}
        """
    )
    async with asyncio.timeout(10):
        result = await sched.reconfigure(new)
    # every routine whose resolved config differs is changed — its assignee and task
    # (keep), its schedule (move), only its approval (gate; issue 28) — and only the
    # identical one is unchanged
    assert result == {
        "added": ["add"],
        "removed": ["drop"],
        "changed": ["keep", "move", "gate"],
        "unchanged": ["same"],
    }
    # a routine whose schedule stayed keeps its next fire time
    assert sched.next_fire_time("keep") == keep_next
    assert sched.next_fire_time("gate") == gate_next
    moved = sched.next_fire_time("move")
    assert moved is not None
    assert iso(moved.timestamp()) == "2027-01-04T15:00:00+00:00"
    assert sched.next_fire_time("drop") is None
    await h.advance_to("2027-01-04T17:00:00")
    assert scheduled(h, "drop") == []
    assert scheduled(h, "add") == ["2027-01-04T12:45:00+00:00"]
    assert scheduled(h, "move") == ["2027-01-04T15:00:00+00:00"]
    keep_tasks = [t for t in h.sink.tasks if t.routine == "keep"]
    assert len(keep_tasks) == 5  # 13:00 … 17:00
    assert keep_tasks[0].prompt == "Keep me, changed." and keep_tasks[0].agent == "marketing"
    # A restart after the reload keeps the new state (no catch-up for 'drop', none owed).
    await h.stop()
    h.clock.advance(60)
    await h.start(new)
    assert h.kinds("routine_missed") == []


async def test_run_now(make_harness: MakeHarness) -> None:
    h = make_harness(company(DAILY_1400), start="2027-01-04T12:00:00")
    sched = await h.start()
    async with asyncio.timeout(5):
        outcome = await sched.run_now("daily-post")
    assert outcome.status is RunStatus.OK
    [row] = h.history("daily-post")
    assert row.kind == "manual" and row.outcome == "ok" and row.run_id == outcome.run_id
    with pytest.raises(RoutineNotFound, match="did you mean 'daily-post'"):
        await sched.run_now("daily-pots")
    # A manual run does not move the schedule: 14:00 still fires.
    await h.advance_to("2027-01-04T14:00:00")
    assert [r.kind for r in h.history("daily-post")] == ["manual", "scheduled"]
    # While a run is active, skip_if_active refuses a manual one with a clear message.
    h.sink.hold = True
    h.sink.gate.clear()
    h.sink.entered.clear()
    first = asyncio.ensure_future(sched.run_now("daily-post"))
    async with asyncio.timeout(5):
        await h.sink.entered.wait()
        with pytest.raises(RoutineBusy, match="running now"):
            await sched.run_now("daily-post")
        h.sink.gate.set()
        assert (await first).ok
    manual = [r for r in h.history("daily-post") if r.kind == "manual"]
    assert len(manual) == 2  # the refused request is not a fire


async def test_run_as_a_child_and_stop_with_a_run_in_flight(make_harness: MakeHarness) -> None:
    # The supervisor stops the scheduler while a run is with the agents: the child returns at
    # once (the run is the runtime's), the fire stays open, and the next start closes it with
    # the resumed run's outcome — not as a failure, and without running it again.
    h = make_harness(
        company("slow: {assignee: coo, description: Slow., trigger: {every: 1m}}\n"),
        start="2027-01-04T12:00:30",
    )
    h.sink.hold = True
    from companyd.scheduler._service import RoutineScheduler

    sched = RoutineScheduler(
        h.config, h.sink, state_dir=h.state_dir, bus=h.bus, clock=h.clock, max_sleep=None
    )
    ctx = StandaloneContext("companyd/scheduler")
    child = asyncio.ensure_future(sched.run(ctx))
    async with asyncio.timeout(5):
        await ctx.ready.wait()
        h.clock.advance(30)
        await h.sink.entered.wait()
        ctx.stopping.set()
        await child  # does not wait for the gate: the run is not the scheduler's to finish
    [row] = h.history("slow")
    assert row.outcome is None and row.task_id == h.sink.tasks[0].id
    assert h.kinds("routine_failed") == []

    h.sink.restores = True
    sched2 = await h.start()
    assert h.sink.asked == [row.task_id]
    [row] = h.history("slow")
    assert row.outcome is None  # still running: the resumed run has not ended
    assert row.task_id is not None
    assert len(sched2.in_flight) == 1
    h.sink.restored[row.task_id].set_result(
        RunOutcome(
            task_id=row.task_id,
            run_id="run-resumed",
            agent="coo",
            status=RunStatus.OK,
            started=0.0,
            ended=0.0,
            cost_usd=0.03,
        )
    )
    async with asyncio.timeout(5):
        await sched2.settle()
    [done] = [r for r in h.history("slow") if r.fire_id == row.fire_id]
    assert done.outcome == "ok" and done.run_id == "run-resumed"
    assert done.cost_usd == pytest.approx(0.03)
    assert "resumed from its journal" in (done.reason or "")
    assert len(h.sink.tasks) == 1  # never submitted a second time
    assert h.kinds("routine_failed") == []


async def test_a_resumed_run_that_fails_closes_its_fire_as_failed_once(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(company(DAILY_1400), start="2027-01-04T13:59:30")
    h.sink.hold = True
    await h.start()
    await h.advance_to("2027-01-04T14:00:00", runs=False)
    async with asyncio.timeout(10):
        await h.sink.entered.wait()
        assert h.sched is not None
        await h.sched.stop(drain=False)
    h.sink.restores = True
    sched = await h.start()
    [row] = h.history("daily-post")
    assert row.task_id is not None
    h.sink.restored[row.task_id].set_result(
        RunOutcome(
            task_id=row.task_id,
            run_id="r",
            agent="marketing",
            status=RunStatus.FAILED,
            started=0.0,
            ended=0.0,
            reason="every model in the chain failed",
        )
    )
    async with asyncio.timeout(5):
        await sched.settle()
    [row] = h.history("daily-post")
    assert row.outcome == "failed"
    assert row.reason is not None and row.reason.startswith("every model in the chain failed")
    assert "resumed from its journal" in row.reason
    [event] = h.kinds("routine_failed")
    assert event.data["fire_id"] == row.fire_id and event.data["outcome"] == "failed"


async def test_a_fire_whose_run_was_not_resumed_is_closed_as_cancelled(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(company(DAILY_1400), start="2027-01-04T13:59:30")
    h.sink.hold = True
    await h.start()
    await h.advance_to("2027-01-04T14:00:00", runs=False)
    async with asyncio.timeout(10):
        await h.sink.entered.wait()
        assert h.sched is not None
        await h.sched.stop(drain=False)
    h.sink.hold = False
    await h.start()  # the runtime holds no such task (restores is off)
    [row] = h.history("daily-post")
    assert h.sink.asked == [row.task_id]
    assert row.outcome == "cancelled"
    assert "did not resume it" in (row.reason or "") and "not run again" in (row.reason or "")
    [event] = h.kinds("routine_failed")
    assert event.data["outcome"] == "cancelled"
    assert len(h.sink.tasks) == 1


async def test_every_due_fire_gets_exactly_one_row_over_a_week(make_harness: MakeHarness) -> None:
    h = make_harness(
        company(
            """\
            a: {assignee: coo, description: A., trigger: {every: 37m}}
            b: {assignee: coo, description: B., trigger: {cron: "15 */3 * * mon-fri"}}
            c: {assignee: coo, description: C., trigger: {cron: "0 8 1 * *"}, enabled: false}
            """,
            timezone="Europe/Berlin",
        ),
        start="2027-01-04T00:00:00",
    )
    await h.start()
    await h.advance(7 * 86400)
    a = scheduled(h, "a")
    b = scheduled(h, "b")
    start, end = int(ts("2027-01-04T00:00:00")), int(ts("2027-01-11T00:00:00"))
    assert len(a) == len(set(a)) == end // 2220 - start // 2220  # the grid from 1970
    assert len(b) == len(set(b)) == 5 * 8
    assert scheduled(h, "c") == []
    assert len(h.sink.tasks) == len(a) + len(b)
    assert datetime.fromisoformat(b[0]).astimezone(ZoneInfo("Europe/Berlin")).hour == 3
    assert all(r.outcome == "ok" for r in h.history("a"))
    assert datetime.fromisoformat(a[0]).tzinfo == UTC


async def test_a_clock_stepped_back_does_not_run_a_fire_twice(make_harness: MakeHarness) -> None:
    h = make_harness(company(DAILY_1400), start="2027-01-04T13:00:00")
    await h.start()
    await h.advance_to("2027-01-04T14:30:00")
    await h.stop()
    # Restart with the wall clock an hour behind (NTP step): 14:00 has already run.
    from companyd.clock import ManualClock

    h.clock = ManualClock(start=ts("2027-01-04T13:30:00"))
    h.bus.clock = h.clock
    sched = await h.start()
    nxt = sched.next_fire_time("daily-post")
    assert nxt is not None and iso(nxt.timestamp()) == "2027-01-05T14:00:00+00:00"
    await h.advance_to("2027-01-04T15:00:00")
    assert scheduled(h, "daily-post") == ["2027-01-04T14:00:00+00:00"]


async def test_stopping_without_drain_records_running_and_waiting_fires(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            "slow: {assignee: coo, description: Slow., trigger: {every: 1m}, concurrency: queue}\n"
        ),
        start="2027-01-04T12:00:30",
    )
    h.sink.hold = True
    sched = await h.start()
    await h.advance_to("2027-01-04T12:02:00", runs=False)
    async with asyncio.timeout(10):
        await sched.stop(drain=False)
    rows = h.history("slow")
    # The run handed over stays open for the next start; the one waiting did not run.
    assert [r.outcome for r in rows] == [None, "cancelled"]
    assert "waited for its turn; it did not run" in (rows[1].reason or "")
    assert len(h.sink.tasks) == 1
    # The next start asks the runtime about the open one (it does not hold it: cancelled);
    # nothing runs again.
    h.sink.hold = False
    await h.start()
    assert h.sink.asked == [rows[0].task_id]
    assert len(h.sink.tasks) == 1
    rows = h.history("slow")
    assert [r.outcome for r in rows] == ["cancelled", "cancelled"]
    assert "before the run ended" in (rows[0].reason or "")


async def test_live_jobs_and_history_views(make_harness: MakeHarness) -> None:
    h = make_harness(
        company(
            DAILY_1400
            + "paused: {assignee: coo, description: Off., trigger: {every: 1h}, enabled: false}\n"
        ),
        start="2027-01-04T12:00:00",
    )
    h.sink.script["daily-post"] = lambda t: (
        (RunStatus.FAILED, "HTTP 500 (injected)", 0.0)
        if len(h.sink.tasks) == 2
        else (RunStatus.OK, None, 0.05)
    )
    sched = await h.start()
    await h.advance_to("2027-01-07T15:00:00")
    async with asyncio.timeout(5):
        view = await sched.jobs()
        hist = await sched.history("daily-post", limit=2)
        with pytest.raises(RoutineNotFound, match="did you mean 'daily-post'"):
            await sched.history("daily-psot")
    assert view["daemon"] is True
    by = {r["routine"]: r for r in view["routines"]}
    assert by["daily-post"]["next_fire"] == "2027-01-08T14:00:00+00:00"
    assert by["daily-post"]["success_7d"] == {"due": 4, "ok": 3, "rate": 0.75, "unverified": 0}
    last = by["daily-post"]["last"]
    assert last is not None and last["outcome"] == "ok"
    assert by["daily-post"]["catch_up"] == "run_once within 2h"
    assert by["paused"]["enabled"] is False and by["paused"]["next_fire"] is None
    assert [f["scheduled"] for f in hist["fires"]] == [
        "2027-01-07T14:00:00+00:00",
        "2027-01-06T14:00:00+00:00",
    ]
    with pytest.raises(RoutineNotFound, match=r"disabled in company\.yaml"):
        await sched.run_now("paused")
    # A front end receiving these as JSON prints the same tables as the offline CLI.
    import json

    from companyd.scheduler._report import (
        JobView,
        format_history_result,
        format_jobs_result,
    )

    wire = json.loads(json.dumps(view))
    assert [JobView.from_dict(r).to_dict() for r in wire["routines"]] == wire["routines"]
    table = format_jobs_result(wire, h.clock.time())
    line = next(x for x in table.splitlines() if x.startswith("daily-post"))
    assert "75.0% (3/4)" in line and "2027-01-08 14:00 UTC (in 23.0h)" in line
    assert "ok " in line
    text = format_history_result(json.loads(json.dumps(hist)), h.config.timezone)
    assert text.splitlines()[0] == "daily-post (marketing) — cron '0 14 * * *' UTC"
    assert "HTTP 500 (injected)" not in text  # only the two newest fires were asked for
    assert len(text.splitlines()) == 5
    assert text.splitlines()[-1] == ("shown: 2 due run(s): 2 ok · 0 unverified")


async def test_the_same_instance_can_be_restarted_by_its_supervisor(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(company(DAILY_1400), start="2027-01-04T13:00:00")
    sched = await h.start()
    for stop_at, up_at in (("13:30", "13:45"), ("13:55", "14:10")):
        await h.advance_to(f"2027-01-04T{stop_at}:00")
        ctx = StandaloneContext("companyd/scheduler")
        await sched.stop()
        h.clock.advance(ts(f"2027-01-04T{up_at}:00") - h.clock.time())
        child = asyncio.ensure_future(sched.run(ctx))
        async with asyncio.timeout(5):
            await ctx.ready.wait()
            await sched.settle()
            ctx.stopping.set()
            await child
        await sched.start()
    assert [(r.kind, r.outcome) for r in h.history("daily-post")] == [("catch_up", "ok")]


async def test_a_stop_cut_short_by_cancellation_still_ends_the_history_thread(
    make_harness: MakeHarness,
) -> None:
    """Chaos run (issue 15): the supervisor cancels a child whose stop outlives its
    shutdown time (25 s, 9 ms at the benchmark's 2880x). A scheduler stop cancelled while
    it recorded the planned stop left routines.sqlite's worker thread waiting for work
    forever; it is not a daemon thread, so the interpreter never exited (SIGTERM -> -9).
    Cancelled at any of its awaits, the stop still ends the thread, and what was already
    submitted (the clean-stop marker) is still written.
    """
    import threading

    from companyd.scheduler._store import DB_NAME, clean_stop

    h = make_harness(company(DAILY_1400), start="2027-01-04T12:00:00")
    for turns in range(1, 12):  # 0: cancelled before it begins, nothing to stop
        sched = await h.start()
        sched.planned_stop(f"SIGTERM {turns}")
        store = sched._rec.store
        assert store is not None
        stopping = asyncio.ensure_future(sched.stop())
        for _ in range(turns):
            await asyncio.sleep(0)
        stopping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(10):
                await stopping
        workers = [t for t in threading.enumerate() if t.name.startswith("routines.sqlite")]
        for t in workers:
            await asyncio.to_thread(t.join, 10)
        stuck = [t for t in workers if t.is_alive()]
        if stuck:
            store.close_nowait()  # let pytest exit
        assert stuck == [], f"cancelled after {turns} turns"
        conn = sqlite3.connect(h.state_dir / DB_NAME)
        try:
            marker = clean_stop(conn)
        finally:
            conn.close()
        if marker is not None:  # written unless cancelled before it was submitted
            assert marker[1] == f"SIGTERM {turns}"
        h.sched = None
