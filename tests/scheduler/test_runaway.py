"""Runaway routines: ``max_runs_per_day`` and ``pause_after_failures``, across restarts.

The real scheduler on a manual clock with its real SQLite history (tests/scheduler/conftest
harness); each guard is checked, then the scheduler is stopped and started again on the same
state directory — the guard holds (docs/scheduler.md, "Runaway routines").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from companyd.runs import RunStatus, Task
from companyd.scheduler._report import JobView, format_jobs

from .conftest import Harness, company

pytestmark = pytest.mark.anyio

MakeHarness = Callable[..., Harness]


async def test_max_runs_per_day_skips_the_rest_of_the_day_even_after_a_restart(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            """\
            poll:
              assignee: coo
              description: Poll.
              trigger: {every: 1h}
              max_runs_per_day: 3
            """
        ),
        start="2027-01-04T00:30:00",
    )
    await h.start()
    await h.advance_to("2027-01-04T05:45:00")  # fires 01:30 … 05:30
    await h.stop()
    await h.start()  # a restart: the count is read from the history
    await h.advance_to("2027-01-04T08:45:00")
    rows = h.history("poll")
    outcomes = [r.outcome for r in rows]
    assert outcomes[:3] == ["ok", "ok", "ok"]
    assert set(outcomes[3:]) == {"skipped"} and len(outcomes) >= 6
    skipped = [r for r in rows if r.outcome == "skipped"]
    assert all("max_runs_per_day: 3" in (r.reason or "") for r in skipped)
    assert len(h.sink.tasks) == 3  # no task past the limit
    # told once for the day, not once per skipped fire, and not again after the restart
    assert len(h.kinds("routine_limit_reached")) == 1
    # the next day runs again
    await h.advance_to("2027-01-05T01:45:00")
    assert h.history("poll")[-1].outcome == "ok"
    assert len(h.sink.tasks) == 5  # 00:30 and 01:30 of the 5th


async def test_pause_after_failures_pauses_holds_across_a_restart_and_resumes(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            """\
            flaky:
              assignee: coo
              description: Try.
              trigger: {every: 10m}
              pause_after_failures: 3
            """
        ),
        start="2027-01-04T00:00:00",
    )
    fail: list[bool] = [True]

    def outcome(task: Task) -> tuple[RunStatus, str | None, float]:
        if fail[0]:
            return RunStatus.FAILED, f"tool post_update failed at {task.id}", 0.01
        return RunStatus.OK, None, 0.01

    h.sink.script["flaky"] = outcome
    await h.start()
    await h.advance_to("2027-01-04T00:55:00")  # 00:10 … 00:50
    rows = h.history("flaky")
    assert [r.outcome for r in rows][:3] == ["failed", "failed", "failed"]
    assert {r.outcome for r in rows[3:]} == {"skipped"}
    assert all("pause_after_failures: 3" in (r.reason or "") for r in rows[3:])
    assert "companyd jobs resume flaky" in (rows[3].reason or "")
    [paused] = h.kinds("routine_paused")
    assert paused.data["failures"] == 3 and len(paused.data["reasons"]) == 3
    assert all("post_update failed" in r for r in paused.data["reasons"])
    assert len(h.sink.tasks) == 3
    await h.stop()
    await h.start()  # still paused after a restart
    await h.advance_to("2027-01-04T01:25:00")
    assert h.history("flaky")[-1].outcome == "skipped"
    assert len(h.sink.tasks) == 3
    assert h.sched is not None
    assert await h.sched.paused_routines() == {"flaky": rows[3].reason}
    [row] = (await h.sched.jobs())["routines"]
    assert row.get("paused") == rows[3].reason  # `companyd jobs` (live) says so
    table = format_jobs([JobView.from_dict(row)], h.clock.time(), daemon=True)
    assert "paused: failed in a row (`companyd jobs resume flaky`)" in table
    # the operator's own run is not held back (and a fourth failure pauses nothing new)
    await h.sched.run_now("flaky")
    assert len(h.sink.tasks) == 4 and len(h.kinds("routine_paused")) == 1
    # resumed by the operator: runs again; the old failures do not count toward a new pause
    assert await h.sched.resume_routine("flaky") is True
    assert await h.sched.resume_routine("flaky") is False
    await h.advance_to("2027-01-04T01:35:00")
    assert h.history("flaky")[-1].outcome == "failed"
    fail[0] = False
    await h.advance_to("2027-01-04T02:05:00")
    assert {r.outcome for r in h.history("flaky")[-3:]} == {"ok"}
    assert len(h.kinds("routine_paused")) == 1 and len(h.kinds("routine_resumed")) == 1


async def test_the_guards_come_from_the_agent_or_the_defaults() -> None:
    text = """\
        a: {assignee: coo, description: A., trigger: {every: 1h}}
        b: {assignee: ceo, description: B., trigger: {every: 1h}, max_runs_per_day: 9}
        """
    config = company(text)
    assert config.routines["a"].max_runs_per_day is None
    from companyd.config import load_config_text

    from .conftest import company_text

    yaml = company_text(text).replace(
        "coo: {title: COO, reportsTo: ceo, instructions: Operate.}",
        "coo: {title: COO, reportsTo: ceo, instructions: Operate., "
        "routines: {max_runs_per_day: 5}}",
    )
    yaml += "defaults:\n  routines: {max_runs_per_day: 7, pause_after_failures: 2}\n"
    config = load_config_text(yaml)
    a, b = config.routines["a"], config.routines["b"]
    assert (a.max_runs_per_day, a.pause_after_failures) == (5, 2)
    assert (b.max_runs_per_day, b.pause_after_failures) == (9, 2)
