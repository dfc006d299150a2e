"""``unverified`` fires in the routine history (issue 27): a due run that is neither ok nor
failed — the 7-day success rate counts it against and shows it apart — and
``routine_unverified``, a warning alert only from the second unverified run in a row (a
success in between starts the count again). Scheduler on the manual clock, a scripted sink.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from companyd.events import Severity
from companyd.runs import RunStatus, Task
from companyd.scheduler._report import JobView, format_jobs

from .conftest import Harness, company

pytestmark = pytest.mark.anyio

WHY = "no successful call of post_update; the answer says 'posted'"
ROUTINES = """\
post:
  assignee: marketing
  description: Post the update.
  trigger: {every: 1h}
"""


async def test_unverified_runs_count_apart_and_alert_from_the_second_in_a_row(
    make_harness: Callable[..., Harness],
) -> None:
    h = make_harness(company(ROUTINES))
    # fires 1-5: unverified, ok, unverified, unverified, unverified
    plan = [RunStatus.UNVERIFIED, RunStatus.OK] + [RunStatus.UNVERIFIED] * 3
    seen: list[Task] = []

    def script(task: Task) -> tuple[RunStatus, str | None, float]:
        status = plan[len(seen)]
        seen.append(task)
        return status, WHY if status is RunStatus.UNVERIFIED else None, 0.01

    h.sink.script = {"post": script}
    await h.start()
    await h.advance(5 * 3600)
    assert len(seen) == 5
    events = h.kinds("routine_unverified")
    assert [e.data["in_a_row"] for e in events] == [1, 1, 2, 3]
    assert [e.severity for e in events] == [
        Severity.INFO,
        Severity.INFO,
        Severity.WARNING,
        Severity.WARNING,
    ]
    assert all(e.data["reason"] == WHY and e.data["outcome"] == "unverified" for e in events)
    assert h.kinds("routine_failed") == []  # not a failure
    assert [f.outcome for f in h.history("post")] == [
        "unverified",
        "ok",
        "unverified",
        "unverified",
        "unverified",
    ]
    assert h.sched is not None
    jobs = await h.sched.jobs()
    [row] = jobs["routines"]
    assert row["success_7d"] == {"due": 5, "ok": 1, "rate": 0.2, "unverified": 4}
    table = format_jobs([JobView.from_dict(row)], h.clock.time(), daemon=True)
    assert "20.0% (1/5, 4 unverified)" in table
