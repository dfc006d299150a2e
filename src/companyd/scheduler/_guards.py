"""Runaway routines: a daily run limit and a pause after failures in a row, both durable.

Per routine (or for all of an agent's routines, ``agents.<slug>.routines``, or every
routine, ``defaults.routines``; docs/scheduler.md, "Runaway routines"):

* ``max_runs_per_day: N`` — once N runs of the routine started on one day (in the routine's
  time zone), its further fires that day are ``skipped`` with that reason; one
  ``routine_limit_reached`` event (an alert) per routine and day.
* ``pause_after_failures: N`` — after N runs in a row that did not succeed (any outcome of
  a run but ``ok``: ``failed``, ``budget_exhausted``, ``cancelled``, ``unverified`` …;
  ``skipped``, ``idle``, ``missed`` and ``stopped`` are no runs and neither break nor
  extend the streak) the routine is paused: its fires are ``skipped`` until ``companyd
  jobs resume ROUTINE`` (or the dashboard) resumes it. One ``routine_paused`` event with
  the last reasons; runs before the resume no longer count.

Both are read from the routine history itself (the ``fires`` table) and the
``routine_guard`` table beside it, so they hold across a restart of the daemon.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from companyd.config import RoutineConfig
from companyd.storage import Connection

__all__ = [
    "NOT_RUNS",
    "day_bounds",
    "failure_streak",
    "guard_state",
    "last_reasons",
    "mark_limit_told",
    "pause_reason",
    "paused_routines",
    "resume_routine",
    "runs_between",
    "set_routine_paused",
]

#: Outcomes that are not runs: they neither count as a failure nor end a streak of them.
NOT_RUNS = ("skipped", "idle", "missed", "stopped")


def day_bounds(now: float, timezone: str) -> tuple[str, float, float]:
    """The day of ``now`` in ``timezone``: its date (ISO) and its start and end (epoch)."""
    tz = ZoneInfo(timezone)
    local = datetime.fromtimestamp(now, tz)
    start = datetime(local.year, local.month, local.day, tzinfo=tz)
    end = datetime.combine(start.date() + timedelta(days=1), start.timetz())
    return start.date().isoformat(), start.timestamp(), end.timestamp()


def runs_between(conn: Connection, routine: str, start: float, end: float) -> int:
    """Runs of ``routine`` started in ``[start, end)`` (a fire whose task was handed over,
    unless it ended ``skipped``).
    """
    row = conn.execute(
        "SELECT COUNT(*) FROM fires WHERE routine = ? AND started >= ? AND started < ? "
        "AND (outcome IS NULL OR outcome <> 'skipped')",
        (routine, start, end),
    ).fetchone()
    return int(row[0])


def guard_state(conn: Connection, routine: str) -> tuple[str | None, float | None, str | None]:
    """``(pause reason or None, resumed_at or None, day the limit was told or None)``."""
    row = conn.execute(
        "SELECT reason, resumed_at, limit_day FROM routine_guard WHERE routine = ?", (routine,)
    ).fetchone()
    if row is None:
        return None, None, None
    return row[0], row[1], row[2]


def paused_routines(conn: Connection) -> dict[str, str]:
    """Routine → why it is paused, for every routine its failures paused."""
    rows = conn.execute(
        "SELECT routine, reason FROM routine_guard WHERE reason IS NOT NULL"
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def failure_streak(
    conn: Connection, routine: str, since: float | None, limit: int
) -> list[tuple[str, str | None]]:
    """The ``(outcome, reason)`` of ``routine``'s latest runs that did not succeed, newest
    first, up to ``limit``: the streak ends at the first ``ok`` run (or at the routine's
    last resume, ``since``).
    """
    rows = conn.execute(
        "SELECT outcome, reason FROM fires WHERE routine = ? AND outcome IS NOT NULL "
        "AND outcome NOT IN (?, ?, ?, ?) AND ended > ? "
        "ORDER BY ended DESC, id DESC LIMIT ?",
        (routine, *NOT_RUNS, since or 0.0, limit),
    ).fetchall()
    out: list[tuple[str, str | None]] = []
    for outcome, reason in rows:
        if outcome == "ok":
            break
        out.append((outcome, reason))
    return out


def set_routine_paused(conn: Connection, routine: str, reason: str, now: float) -> None:
    """Pause ``routine`` (its fires are skipped until it is resumed)."""
    conn.execute(
        "INSERT INTO routine_guard (routine, reason, paused_since) VALUES (?, ?, ?) "
        "ON CONFLICT (routine) DO UPDATE SET reason = excluded.reason, "
        "paused_since = excluded.paused_since",
        (routine, reason, now),
    )


def resume_routine(conn: Connection, routine: str, now: float) -> bool:
    """Resume ``routine``: its fires run again and earlier failures no longer count toward
    a pause. False if it was not paused.
    """
    state = guard_state(conn, routine)
    conn.execute(
        "INSERT INTO routine_guard (routine, resumed_at) VALUES (?, ?) "
        "ON CONFLICT (routine) DO UPDATE SET reason = NULL, paused_since = NULL, "
        "resumed_at = excluded.resumed_at",
        (routine, now),
    )
    return state[0] is not None


def mark_limit_told(conn: Connection, routine: str, day: str) -> bool:
    """Note that ``routine``'s daily limit was told for ``day``; False if it already was."""
    if guard_state(conn, routine)[2] == day:
        return False
    conn.execute(
        "INSERT INTO routine_guard (routine, limit_day) VALUES (?, ?) "
        "ON CONFLICT (routine) DO UPDATE SET limit_day = excluded.limit_day",
        (routine, day),
    )
    return True


def pause_reason(r: RoutineConfig, streak: Sequence[tuple[str, str | None]]) -> str:
    """Why ``r`` is paused after ``streak`` (newest first), with the command to resume."""
    return (
        f"paused after {len(streak)} runs in a row that did not succeed "
        f"(pause_after_failures: {r.pause_after_failures}); resume it with `companyd jobs "
        f"resume {r.slug}` or on the dashboard"
    )


def last_reasons(streak: Sequence[tuple[str, str | None]]) -> list[str]:
    """The streak's reasons, oldest first, each short."""
    out: list[str] = []
    for outcome, reason in reversed(streak):
        text = f"{outcome}: {reason or 'no reason given'}"
        out.append(text if len(text) <= 300 else text[:299] + "…")
    return out
