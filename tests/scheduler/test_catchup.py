"""Start-up decisions on their own (``scheduler/_catchup.py``: pure functions of the routines,
their persisted state and "now"): the bounded look-back of a very long outage, a wall clock
stepped back, and a new routine owing nothing. The scheduler's own tests
(``test_scheduler.py``) cover run_once, skip, grace, planned stops and the summary row
through a real start.
"""

from __future__ import annotations

from companyd.config import RoutineConfig
from companyd.scheduler._catchup import CATCH_UP_WINDOW, plan_start
from companyd.scheduler._store import RoutineState
from companyd.scheduler._triggers import build_trigger, trigger_identity

from .conftest import company, iso, ts

DAILY_SKIP = """\
daily:
  assignee: coo
  description: Daily check.
  trigger: {cron: "0 14 * * *", timezone: UTC}
  catch_up: skip
"""


def _daily() -> tuple[RoutineConfig, str]:
    """The routine, and the trigger identity its persisted state holds when unchanged."""
    routine = company(DAILY_SKIP).routines["daily"]
    return routine, trigger_identity(build_trigger(routine))


def test_an_outage_longer_than_the_window_counts_only_the_window_and_says_so() -> None:
    routine, ident = _daily()
    cursor, now = ts("2027-01-01T15:00:00"), ts("2027-03-02T15:00:00")  # down 60 days
    state = RoutineState(routine="daily", trigger=ident, cursor=cursor, last_fire=None)
    [plan] = plan_start([routine], {"daily": state}, now=now)
    since = now - CATCH_UP_WINDOW
    fires = sum(r.fires for r in plan.missed)
    assert fires == 35  # one 14:00 a day over the 35 days looked back, not 60
    assert all(r.scheduled > since for r in plan.missed)
    assert all(r.outcome == "missed" for r in plan.missed)
    assert "(catch_up: skip)" in (plan.missed[0].reason or "")
    assert f"the daemon was down since {iso(cursor)}" in (plan.missed[0].reason or "")
    assert f"fire times before {iso(since)} were not counted" in (plan.missed[0].reason or "")
    assert "were not counted" not in (plan.missed[1].reason or "")  # said once
    # the cursor moves past what was recorded, so the next start does not count it again
    assert plan.state.cursor == plan.missed[-1].scheduled == ts("2027-03-02T14:00:00")
    assert plan.catch_up is None
    assert plan.next_run is not None and plan.next_run.isoformat() == "2027-03-03T14:00:00+00:00"


def test_a_clock_stepped_back_never_repeats_fire_times_already_dealt_with() -> None:
    routine, ident = _daily()
    cursor = ts("2027-01-05T14:00:00")  # the 14:00 fire of Jan 5 ran
    now = ts("2027-01-05T10:00:00")  # ... and the wall clock now reads 4 h earlier
    state = RoutineState(routine="daily", trigger=ident, cursor=cursor, last_fire=cursor)
    [plan] = plan_start([routine], {"daily": state}, now=now)
    assert plan.missed == [] and plan.catch_up is None
    # not today's 14:00 again (after "now"), but the one after the cursor
    assert plan.next_run is not None and plan.next_run.isoformat() == "2027-01-06T14:00:00+00:00"
    assert plan.state.cursor == cursor


def test_a_new_routine_owes_nothing_and_waits_for_its_next_fire_time() -> None:
    routine, _ident = _daily()
    now = ts("2027-01-05T15:00:00")
    [plan] = plan_start([routine], {}, now=now)
    assert plan.missed == [] and plan.catch_up is None
    assert plan.state.cursor == now and plan.state.last_fire is None
    assert plan.next_run is not None and plan.next_run.isoformat() == "2027-01-06T14:00:00+00:00"
