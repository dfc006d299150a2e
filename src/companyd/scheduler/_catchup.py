"""Start-up decisions: which fire times passed while the daemon was down, and what to do.

Pure functions of company.yaml's routines, their persisted :class:`RoutineState` and "now"
(no I/O, no clock), run by the scheduler in a worker thread because walking cron fire times
across a long outage is CPU work.

For each enabled routine:

* **new, or its trigger changed** (``repr`` differs, time zone included): nothing is owed —
  fire times of an old schedule are not owed under a new one. Its cursor becomes now and it
  waits for its next fire time.
* **unchanged**: the fire times after the cursor and not after now were missed while down
  (looked for at most :data:`CATCH_UP_WINDOW` back). With ``catch_up: run_once`` the latest
  of them runs once, at start, if it is at most ``grace`` old; every other one is ``missed``
  with the reason. The newest :data:`MAX_MISSED_ROWS` get a row each; older ones share one
  row whose ``fires`` says how many it stands for.

A fire time the catch-up does not serve is ``stopped`` instead of ``missed`` when it fell
after a planned stop (the clean-stop marker the previous run left in routines.sqlite): the
operator chose that downtime, so it is neither a miss nor a due run. Without the marker (a
crash, kill -9, power loss) it is ``missed``.

**Backup routines** are not held to the at-most-once rule: a backup calls no model and is
idempotent, so one whose latest fire produced no backup takes one at start, once (a
:class:`Retake`, run as a ``catch_up`` fire and claimed as every catch-up fire is),
whatever its ``catch_up`` says:

* its latest fire time passed while the daemon was down (``missed`` or ``stopped``) and
  ``run_once`` does not serve it: that fire time is the retake (the earlier ones are
  recorded as before);
* its latest fire (the one at the cursor) was ``cancelled`` — the daemon's stop came under
  the backup (:data:`BACKUP_STOPPED`), or a crash cut it short (:data:`BACKUP_CRASHED`, the
  start closed it): the retake is at the cursor plus :data:`RETAKE_STEP`, a fire time every
  scheduler reading this history computes alike, so of two on one database exactly one
  claims it.

An ``ok`` or ``failed`` latest fire is not taken again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from companyd._frozen import Frozen
from companyd.clock import utc_from_ts
from companyd.config import RoutineConfig
from companyd.scheduler._ids import new_id
from companyd.scheduler._outcomes import Outcome
from companyd.scheduler._store import FireRecord, RoutineState
from companyd.scheduler._triggers import (
    build_trigger,
    fire_times,
    format_seconds,
    next_after,
    trigger_identity,
)

__all__ = [
    "BACKUP_CRASHED",
    "BACKUP_STOPPED",
    "CATCH_UP_WINDOW",
    "MAX_MISSED_ROWS",
    "RETAKE_STEP",
    "Retake",
    "StartPlan",
    "missed_records",
    "plan_start",
]

#: Fire times missed while down are looked for at most this far back (bounded start-up work).
CATCH_UP_WINDOW = 35 * 86400.0
#: Missed fire times beyond this many (per routine, per start) share one history row.
MAX_MISSED_ROWS = 100
#: A retaken backup's fire time is its interrupted fire's plus this (seconds): after the
#: cursor, so the claim can move it there, and far below any schedule's interval.
RETAKE_STEP = 0.001

#: why a backup routine's fire the daemon's stop came under is ``cancelled``
BACKUP_STOPPED = (
    "interrupted: the daemon stopped during the backup; nothing was written; it is taken "
    "again when the daemon starts"
)
#: why a backup routine's fire a crash cut short is closed ``cancelled`` at the next start
BACKUP_CRASHED = (
    "interrupted: the daemon stopped (crash, kill or power loss) before the backup ended; "
    "it is taken again at start"
)


class Retake(Frozen):
    """A backup routine's backup owed at start: run at once as a ``catch_up`` fire of fire
    time ``at``, its reason ending with ``why``.
    """

    at: datetime
    why: str


class StartPlan(Frozen):
    """What start-up decided for one routine.

    Attributes:
        routine: its configuration.
        trigger: its APScheduler trigger; ``identity`` is ``repr(trigger)``.
        state: the state to persist now (cursor moved past the missed fire times).
        next_run: the job's first ``next_run_time`` (the catch-up fire time, when there is
            one, else the next fire time after now; None if the schedule has ended).
        catch_up: the fire time to run once at start, if any.
        missed: history rows for fire times not served while the daemon was down, oldest
            first: ``missed``, then ``stopped`` for those after a planned stop.
        retake: a backup routine's backup taken at start (see the module doc), if any.
    """

    routine: RoutineConfig
    trigger: Any
    identity: str
    state: RoutineState
    next_run: datetime | None
    catch_up: datetime | None
    missed: list[FireRecord]
    retake: Retake | None = None


def _at(ts: float) -> str:
    """A moment in a fire's reason: ISO 8601 in UTC, to the second (no microseconds)."""
    return utc_from_ts(ts).isoformat(timespec="seconds")


def plan_start(
    routines: Iterable[RoutineConfig],
    states: Mapping[str, RoutineState],
    now: float,
    stopped: tuple[float, str] | None = None,
    latest: Mapping[str, FireRecord] | None = None,
) -> list[StartPlan]:
    """Decide each routine's first run and its missed fire times at a start at ``now``.

    ``stopped`` is the planned stop the previous run recorded, ``(at, why)``, if any;
    ``latest`` each backup routine's latest scheduled or catch-up fire in the history
    (after the start closed the fires a crash left open).
    """
    plans = []
    now_dt = utc_from_ts(now)
    for r in routines:
        trigger = build_trigger(r)
        ident = trigger_identity(trigger)
        st = states.get(r.slug)
        if st is None or st.trigger != ident:
            state = RoutineState(
                routine=r.slug,
                trigger=ident,
                cursor=now,
                last_fire=st.last_fire if st else None,
                memory_marker=st.memory_marker if st else None,
                updated=now,
            )
            plans.append(
                StartPlan(
                    routine=r,
                    trigger=trigger,
                    identity=ident,
                    state=state,
                    next_run=next_after(trigger, now_dt),
                    catch_up=None,
                    missed=[],
                )
            )
            continue
        previous = None if latest is None else latest.get(r.slug)
        plans.append(_plan_catch_up(r, trigger, ident, st, now, stopped, previous))
    return plans


def _plan_catch_up(
    r: RoutineConfig,
    trigger: Any,
    ident: str,
    st: RoutineState,
    now: float,
    stopped: tuple[float, str] | None = None,
    previous: FireRecord | None = None,
) -> StartPlan:
    now_dt = utc_from_ts(now)
    since = max(st.cursor, now - CATCH_UP_WINDOW)
    times = fire_times(trigger, utc_from_ts(since), now_dt)
    state = replace(st, updated=now)
    if not times:
        # max(): after the wall clock was stepped back, fire times up to the cursor have
        # already been dealt with and must not run a second time.
        start_from = utc_from_ts(max(now, st.cursor))
        return StartPlan(
            routine=r,
            trigger=trigger,
            identity=ident,
            state=state,
            next_run=next_after(trigger, start_from),
            catch_up=None,
            missed=[],
            retake=_retake_interrupted(r, trigger, st, previous),
        )
    latest = times[-1]
    late = now - latest.timestamp()
    catch_up: datetime | None = None
    retake: Retake | None = None
    if r.catch_up.policy == "run_once" and late <= r.catch_up.grace:
        catch_up, missed = latest, times[:-1]
        reason = (
            "daemon was down at this fire time; catch_up run_once serves only the latest "
            f"missed fire time ({latest.astimezone(trigger.timezone):%Y-%m-%d %H:%M %Z})"
        )
        next_run: datetime | None = latest
    elif r.backup is not None:
        # a backup is taken again whatever catch_up says: it calls no model
        when = _when(trigger, latest.timestamp())
        if stopped is not None and latest.timestamp() > stopped[0]:
            why = f"the backup of {when} fell while the daemon was stopped on purpose"
        else:
            why = f"the backup of {when} was missed: the daemon was down at its time"
        retake = Retake(at=latest, why=f"{why}; taken at start")
        missed = times[:-1]
        reason = (
            "daemon was down at this fire time; a backup routine takes only the latest "
            f"missed backup at start ({when})"
        )
        next_run = next_after(trigger, latest)
    else:
        missed = times
        if r.catch_up.policy == "run_once":
            reason = (
                f"daemon was down at this fire time; at start the latest missed fire time "
                f"was {format_seconds(late)} old, beyond the catch-up grace of "
                f"{format_seconds(r.catch_up.grace)}"
            )
        else:
            reason = "daemon was down at this fire time (catch_up: skip)"
        next_run = next_after(trigger, latest)
    if stopped is None:
        records = missed_records(r, missed, reason, now)
    else:
        stop_at, stop_why = stopped
        down = [t for t in missed if t.timestamp() <= stop_at]
        planned = [t for t in missed if t.timestamp() > stop_at]
        stop_reason = (
            f"skipped because the daemon was stopped on purpose ({stop_why}, at "
            f"{_at(stop_at)}); catch_up {r.catch_up.policy} did not serve "
            "this fire time — a planned stop is not a miss"
        )
        records = missed_records(r, down, reason, now) + missed_records(
            r, planned, stop_reason, now, outcome=Outcome.STOPPED
        )
    if since > st.cursor and records:
        records[0] = replace(
            records[0],
            reason=(
                f"{records[0].reason}; the daemon was down since "
                f"{_at(st.cursor)} — fire times before {_at(since)} were not counted"
            ),
        )
    if missed:
        last = missed[-1].timestamp()
        state = replace(state, cursor=max(st.cursor, last), last_fire=last)
    return StartPlan(
        routine=r,
        trigger=trigger,
        identity=ident,
        state=state,
        next_run=next_run,
        catch_up=catch_up,
        missed=records,
        retake=retake,
    )


def _when(trigger: Any, t: float) -> str:
    """Fire time ``t`` as a retake's reason names it, in the trigger's time zone."""
    return f"{utc_from_ts(t).astimezone(trigger.timezone):%Y-%m-%d %H:%M:%S %Z}"


def _retake_interrupted(
    r: RoutineConfig, trigger: Any, st: RoutineState, last: FireRecord | None
) -> Retake | None:
    """The retake of backup routine ``r`` whose fire at the cursor, ``last``, was cancelled
    (a stop came under it, or a crash cut it short); None otherwise.
    """
    if r.backup is None or last is None or last.outcome != str(Outcome.CANCELLED):
        return None
    if last.scheduled < st.cursor:
        return None  # a later fire time was dealt with since
    how = "a crash of the daemon" if last.reason == BACKUP_CRASHED else "the stop"
    why = f"the backup of {_when(trigger, last.scheduled)} was interrupted by {how}"
    return Retake(at=utc_from_ts(st.cursor + RETAKE_STEP), why=f"{why}; taken again at start")


def missed_records(
    r: RoutineConfig,
    times: list[datetime],
    reason: str,
    now: float,
    outcome: Outcome = Outcome.MISSED,
) -> list[FireRecord]:
    """History rows (outcome ``missed``, or ``stopped``) for ``times``, oldest first; see the
    module doc.
    """
    older, newest = times[:-MAX_MISSED_ROWS], times[-MAX_MISSED_ROWS:]

    def row(t: datetime, why: str, fires: int = 1) -> FireRecord:
        return FireRecord(
            fire_id=new_id("fire"),
            routine=r.slug,
            agent=r.assignee,
            kind="scheduled",
            scheduled=t.timestamp(),
            fired=now,
            ended=now,
            outcome=str(outcome),
            reason=why,
            fires=fires,
        )

    records = []
    if older:
        records.append(
            row(
                older[0],
                f"{reason}; this row stands for {len(older)} fire times from "
                f"{older[0].isoformat()} to {older[-1].isoformat()}",
                len(older),
            )
        )
    records.extend(row(t, reason) for t in newest)
    return records
