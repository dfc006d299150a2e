"""company.yaml triggers as APScheduler 3 triggers, and fire-time arithmetic on them.

* ``cron`` (5 fields, named weekdays) becomes a :class:`RoutineCronTrigger` in the routine's
  time zone. It behaves like APScheduler's ``CronTrigger`` except on the day clocks go back:
  a *fixed-time* routine (neither the minute nor the hour field starts with ``*``) fires once,
  at the first occurrence of the repeated wall-clock time, as Vixie cron does; wildcard
  routines (``*/15 * * * *``, ``0 * * * *``) keep firing at every real occurrence. On the day
  clocks go forward a fire time inside the skipped hour happens once, one hour later on the
  wall clock (02:30 → 03:30 CEST), as APScheduler does when the gap time is the first
  candidate of its night; companyd also does it when an earlier fire time of the same night
  comes first (``30 1,2 * * *``), where APScheduler's search steps over the gap and loses the
  fire time. docs/scheduler.md has the table.
* ``every`` becomes an ``IntervalTrigger`` anchored at 1970-01-01 00:00 UTC, so fire times lie
  on a fixed grid (``every: 1h`` fires on the hour) and ``repr(trigger)`` is the same in every
  process — the identity compared on restart (APScheduler's default anchor is "now + interval",
  which would change the identity, and the fire times, at every start).

All datetimes handed to these helpers may be in any zone; they are converted to the
trigger's zone (with the right ``fold``) before APScheduler sees them, so a fire time inside
the repeated hour is never confused with its twin.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from companyd.config import RoutineConfig

__all__ = [
    "INTERVAL_ANCHOR",
    "RoutineCronTrigger",
    "WebhookOnly",
    "build_trigger",
    "describe_schedule",
    "fire_times",
    "format_seconds",
    "next_after",
    "trigger_identity",
]

#: The grid every ``every:`` routine fires on.
INTERVAL_ANCHOR = datetime(1970, 1, 1, tzinfo=UTC)

_TICK = timedelta(microseconds=1)


class RoutineCronTrigger(CronTrigger):  # type: ignore[misc]  # apscheduler is untyped
    """A ``CronTrigger`` that fires a fixed-time routine once on the fall-back day.

    Args:
        expr: a 5-field cron expression (minute hour day-of-month month day-of-week), already
            validated by :func:`companyd.config.load_config`.
        timezone: IANA name of the zone the fields are read in.
    """

    def __init__(self, expr: str, timezone: str) -> None:
        minute, hour, day, month, day_of_week = expr.split()
        super().__init__(
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=day_of_week,
            timezone=ZoneInfo(timezone),
        )
        # Vixie cron's rule: "wildcard" jobs (minute or hour starting with '*') run at every
        # real occurrence; jobs at fixed times are not run again in the repeated hour.
        self.once_in_repeated_hour = not (minute.startswith("*") or hour.startswith("*"))
        # The same fields read on a clock without DST: which wall times in a spring-forward
        # gap are fire times (see _gap_fire_time).
        self._wall = CronTrigger(
            minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week, timezone=UTC
        )

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """APScheduler's next fire time, as a real instant of the zone (never a skipped wall
        time), and without the repeated wall time of a fixed-time routine.

        A wall time in the spring-forward gap (02:30 Berlin on 29 Mar 2026) comes back from
        APScheduler as the non-existent ``02:30+01:00``; it is normalised to the instant it
        stands for (03:30 CEST). Left as it was, the next call starts from a datetime whose
        ``==`` with the normalised start compares wall times (same tzinfo, PEP 495) and
        misses, so ``30 2-3 * * *`` would return 03:30 CEST — the same instant — a second
        time: a spurious ``missed`` row (coalesced) or two catch-up rows for one fire time.
        """
        if previous_fire_time is not None:
            previous_fire_time = _normalised(previous_fire_time, self.timezone)
        nxt: datetime | None = super().get_next_fire_time(previous_fire_time, now)
        while nxt is not None:
            nxt = _normalised(nxt, self.timezone)
            if not (self.once_in_repeated_hour and _is_second_occurrence(nxt)):
                break
            nxt = super().get_next_fire_time(nxt, nxt)
        # from now (inclusive), or strictly after the previous fire time
        lo = now if previous_fire_time is None else previous_fire_time + _TICK
        gap = self._gap_fire_time(lo.astimezone(UTC), nxt)
        if gap is not None and (nxt is None or gap < nxt):
            return gap
        return nxt

    def _gap_fire_time(self, lo: datetime, nxt: datetime | None) -> datetime | None:
        """The first fire time at or after ``lo`` and before ``nxt`` that falls in a
        spring-forward gap and that APScheduler skips, as the instant it moves to.

        A wall time in the gap happens once, one gap later on the wall clock (02:30 → 03:30
        CEST). APScheduler finds that only when the gap time is the first candidate of its
        day; when an earlier fire time of the same night precedes it (``30 1,2 * * *``,
        ``0,30 2 * * *``) its search steps over the gap and the fire time is lost without a
        trace. Here every gap between ``lo`` (less the longest gap, 3 h: its moved instants
        lie after the transition) and ``nxt`` is read on a DST-free clock instead.
        """
        hi = nxt.astimezone(UTC) if nxt is not None else lo + timedelta(days=400)
        best: datetime | None = None
        for at, before, after in _forward_transitions(self.timezone, lo - _LONGEST_GAP, hi):
            wall_start = (at + before).replace(tzinfo=UTC)  # the first skipped wall time
            wall_end = wall_start + (after - before)
            wall = self._wall.get_next_fire_time(None, wall_start)
            while wall is not None and wall < wall_end:
                instant = (at + (wall - wall_start)).astimezone(self.timezone)
                if instant >= lo and instant.astimezone(UTC) < hi:
                    if best is None or instant < best:
                        best = instant
                    break  # later walls of this gap move to later instants
                wall = self._wall.get_next_fire_time(wall, wall)
        return best


#: Longer than any spring-forward gap in the tz database (1 h almost everywhere; 30 min on
#: Lord Howe; a few historical 2 h).
_LONGEST_GAP = timedelta(hours=3)


def _forward_transitions(
    tz: Any, lo: datetime, hi: datetime
) -> list[tuple[datetime, timedelta, timedelta]]:
    """The UTC offset changes of ``tz`` that move clocks forward in ``(lo, hi]``: the
    instant of each (in UTC), with the offsets before and after it. Found by comparing
    offsets a week apart (no zone changes its offset twice within a week), then bisecting
    to the second: about 50 offset lookups for a year.
    """
    out: list[tuple[datetime, timedelta, timedelta]] = []
    t = lo.astimezone(UTC).replace(microsecond=0)
    off = t.astimezone(tz).utcoffset()
    week = timedelta(days=7)
    while t < hi:
        t2 = min(t + week, hi)
        off2 = t2.astimezone(tz).utcoffset()
        if off2 != off:
            a, b = t, t2
            while b - a > timedelta(seconds=1):
                m = a + (b - a) // 2
                m = m.replace(microsecond=0)
                if m <= a:
                    break
                if m.astimezone(tz).utcoffset() == off:
                    a = m
                else:
                    b = m
            before, after = a.astimezone(tz).utcoffset(), b.astimezone(tz).utcoffset()
            if before is not None and after is not None and after > before:
                out.append((b, before, after))
            off = off2
        t = t2
    return out


def _normalised(dt: datetime, tz: Any) -> datetime:
    """``dt`` as the wall time that really exists in ``tz`` at its instant (fold set)."""
    return dt.astimezone(UTC).astimezone(tz)


def _is_second_occurrence(dt: datetime) -> bool:
    """Whether ``dt`` is the later of two instants sharing its wall-clock time (fall-back)."""
    tz = dt.tzinfo
    wall = dt.replace(tzinfo=None)
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return False  # an ordinary wall time: it happens once
    # Both folds differ for a skipped (spring-forward) wall time too; only a repeated one
    # survives the round trip through UTC with its wall time intact in both folds.
    for cand in (first, second):
        if cand.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != wall:
            return False
    return dt.astimezone(UTC) == second.astimezone(UTC)


class WebhookOnly:
    """The clock trigger of a routine fired only by its webhook: it never fires.

    Its ``repr`` is the same in every process (the identity compared on restart), and every
    helper here treats it as a schedule that has ended (no next fire time, no missed one).
    """

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """None: no fire time, ever."""
        return None

    def __repr__(self) -> str:
        return "<WebhookOnly>"


def build_trigger(routine: RoutineConfig) -> Any:
    """The APScheduler trigger for ``routine`` (a cron or an interval trigger; for a routine
    with only a ``webhook`` trigger, a :class:`WebhookOnly` that never fires).
    """
    if routine.cron is not None:
        return RoutineCronTrigger(routine.cron, routine.timezone)
    if routine.every is None:
        if routine.webhook is not None:
            return WebhookOnly()
        # the config schema forbids it; kept for a clear message
        raise ValueError(f"routine {routine.slug!r} has neither 'cron' nor 'every'")
    return IntervalTrigger(seconds=routine.every, start_date=INTERVAL_ANCHOR, timezone=UTC)


def trigger_identity(trigger: Any) -> str:
    """What identifies a schedule across restarts: ``repr(trigger)``.

    ``repr`` includes the time zone (and the interval's anchor); ``str`` does not, so a routine
    moved from UTC to Europe/Berlin would otherwise look unchanged.
    """
    return repr(trigger)


def next_after(trigger: Any, t: datetime) -> datetime | None:
    """The first fire time strictly after instant ``t`` (None when the schedule has ended)."""
    if isinstance(trigger, WebhookOnly):
        return None
    if isinstance(trigger, IntervalTrigger):
        # previous_fire_time would add the interval to ``t`` and leave the grid when ``t`` is
        # not itself a fire time (e.g. the moment a routine was armed).
        nxt: datetime | None = trigger.get_next_fire_time(None, t.astimezone(UTC) + _TICK)
    else:
        # In the trigger's own zone: CronTrigger compares its start with previous_fire_time,
        # and an inter-zone == is always False for a wall time in the repeated hour (PEP 495),
        # which would hand back ``t`` itself.
        local = t.astimezone(trigger.timezone)
        nxt = trigger.get_next_fire_time(local, local)
    return nxt


def fire_times(
    trigger: Any, after: datetime, until: datetime, limit: int | None = None
) -> list[datetime]:
    """Fire times ``f`` with ``after < f <= until``, oldest first (at most ``limit``)."""
    out: list[datetime] = []
    cur = after
    until_utc = until.astimezone(UTC)
    while limit is None or len(out) < limit:
        nxt = next_after(trigger, cur)
        if nxt is None or nxt.astimezone(UTC) > until_utc:
            break
        out.append(nxt)
        cur = nxt
    return out


def format_seconds(seconds: float) -> str:
    """``300`` → ``5m``, ``5400`` → ``1h30m``, ``86400`` → ``1d``, ``1.5`` → ``1.5s``."""
    if seconds < 60 and seconds != int(seconds):
        return f"{seconds:g}s"
    rest = round(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or "0s"


def describe_schedule(routine: RoutineConfig) -> str:
    """A one-line schedule for humans: ``cron '0 14 * * *' UTC``, ``every 5m``, ``webhook``
    or ``every 1h + webhook``.
    """
    hook = " + webhook" if routine.webhook is not None else ""
    if routine.cron is not None:
        return f"cron {routine.cron!r} {routine.timezone}{hook}"
    if routine.every is None:
        return "webhook"
    return f"every {format_seconds(routine.every)}{hook}"
