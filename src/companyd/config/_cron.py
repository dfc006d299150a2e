"""Cron expressions and time zones, checked as the scheduler will read them.

:func:`cron_problem` accepts exactly the 5-field expressions APScheduler 3 parses and that
fire at least once, with day-of-week by name only (APScheduler and crontab number the days
differently); :func:`check_tz` accepts IANA zone names and suggests the closest one.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from companyd.config._report import Path_, Report

__all__ = ["check_tz", "cron_problem"]


def check_tz(value: Any, path: Path_, rep: Report) -> None:
    """Report ``value`` at ``path`` unless it is a known IANA time zone (or not text)."""
    if isinstance(value, str) and not rep.is_settled(path) and not _valid_tz(value):
        rep.add(path, _tz_message(value))


def _valid_tz(name: str) -> bool:
    if not name or name != name.strip():
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


@functools.cache
def _zones() -> tuple[str, ...]:
    return tuple(sorted(available_timezones()))


def _tz_message(name: str) -> str:
    zones = _zones()
    lowered = {z.lower(): z for z in zones}
    close = [lowered[name.lower()]] if name.lower() in lowered else []
    import difflib  # here: only a misspelt zone needs it (issue 31: not at the daemon's start)

    close = close or difflib.get_close_matches(name, zones, n=1, cutoff=0.6)
    if not close and "/" in name:  # right city, wrong region: "Europe/Tokyo"
        city = name.rsplit("/", 1)[1].lower()
        close = [z for z in zones if z.lower().endswith("/" + city)][:1]
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if not close and re.fullmatch(r"(UTC|GMT)?[+-]\d{1,2}(:?\d\d)?", name.strip()):
        hint = (
            "; a fixed offset does not follow daylight saving time — use the place's zone "
            "(e.g. 'Europe/Berlin'), or 'UTC'"
        )
    return f"expected an IANA time zone such as 'UTC' or 'Europe/Berlin', got {name!r}{hint}"


_CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")
_CRON_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * sun",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


def cron_problem(expr: str) -> str | None:
    """Why ``expr`` is not an acceptable 5-field cron expression, or None."""
    macro = _CRON_MACROS.get(expr.strip().lower())
    if macro:
        return f"expected 5 cron fields, got the macro {expr!r}; write {macro!r} instead"
    fields = expr.split()
    if len(fields) != 5:
        return (
            f"expected 5 cron fields (minute hour day-of-month month day-of-week), got "
            f"{len(fields)} in {expr!r}"
        )
    dow = fields[4]
    if re.search(r"(?<![a-z])\d", dow.lower()):
        return (
            f"expected day-of-week by name (e.g. 'mon-fri', 'sun'), got {dow!r}: numbers are "
            "ambiguous (APScheduler 3 counts 0 as Monday, crontab as Sunday)"
        )
    # Imported here, not at the top: APScheduler costs start-up time to every command
    # that imports config, and only a cron expression needs it.
    from apscheduler.triggers.cron import CronTrigger

    for name, value in zip(_CRON_FIELDS, fields, strict=True):
        try:
            CronTrigger(**{name: value}, timezone="UTC")
        except Exception as exc:  # a third-party parser: any failure means "invalid"
            return f"expected a valid cron expression, got {expr!r}: {name} field: {exc}"
    try:
        trigger = CronTrigger(**dict(zip(_CRON_FIELDS, fields, strict=True)), timezone="UTC")
    except Exception as exc:
        return f"expected a valid cron expression, got {expr!r}: {exc}"
    if trigger.get_next_fire_time(None, datetime(2000, 1, 1, tzinfo=UTC)) is None:
        return (
            f"expected a cron expression that fires, got {expr!r}: no month has that day "
            "(e.g. 31 in February); fix the day or the month"
        )
    return None
