"""Budget periods: days and months in the company's time zone.

A day key is ``"YYYY-MM-DD"`` and a month key ``"YYYY-MM"`` — the local date in
``company.timezone`` at the moment of the call. Budgets reset at local midnight (and at
local midnight of the first of the month). Where a time zone skips midnight (a DST gap at
00:00), the day starts at the first instant that exists.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

__all__ = [
    "day_key",
    "day_start",
    "month_key",
    "next_day_start",
    "next_month_start",
    "parse_period",
    "period_keys",
]


def _local(ts: float, tz: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ts, tz=tz)


def day_key(ts: float, tz: ZoneInfo) -> str:
    """``YYYY-MM-DD`` of ``ts`` in ``tz``."""
    return _local(ts, tz).date().isoformat()


def month_key(ts: float, tz: ZoneInfo) -> str:
    """``YYYY-MM`` of ``ts`` in ``tz``."""
    return _local(ts, tz).strftime("%Y-%m")


def period_keys(ts: float, tz: ZoneInfo) -> tuple[str, str]:
    """``(day, month)`` keys of ``ts`` in ``tz``."""
    d = _local(ts, tz)
    return d.date().isoformat(), d.strftime("%Y-%m")


def _start_of(d: date, tz: ZoneInfo) -> float:
    # fold=0 on a nonexistent local midnight resolves to the instant the gap ends, which
    # is the first moment of the new day; on an ambiguous one, to its first occurrence.
    return datetime(d.year, d.month, d.day, tzinfo=tz).timestamp()


def day_start(day: str, tz: ZoneInfo) -> float:
    """Epoch seconds of local midnight starting ``day`` (``2026-11-29``) in ``tz``."""
    return _start_of(date.fromisoformat(day), tz)


def next_day_start(ts: float, tz: ZoneInfo) -> float:
    """Epoch seconds of the next local midnight after ``ts``."""
    return _start_of(_local(ts, tz).date() + timedelta(days=1), tz)


def next_month_start(ts: float, tz: ZoneInfo) -> float:
    """Epoch seconds of local midnight on the first of the next month after ``ts``."""
    d = _local(ts, tz).date()
    first = date(d.year + 1, 1, 1) if d.month == 12 else date(d.year, d.month + 1, 1)
    return _start_of(first, tz)


_DATE = r"\d{4}-\d{2}-\d{2}"
_RANGE_RE = re.compile(rf"^({_DATE})?\.\.({_DATE})?$")
_MONTH_RE = re.compile(r"^\d{4}-\d{2}$")


def parse_period(spec: str, today: date) -> tuple[date, date, str]:
    """``(first_day, last_day, label)`` for ``today``, ``yesterday``, ``month``,
    ``YYYY-MM``, ``YYYY-MM-DD`` or ``DATE..DATE`` (either end may be left open: the open
    start is 2000-01-01, the open end is today).

    Raises:
        ValueError: naming the accepted forms.
    """
    s = spec.strip()
    try:
        if s == "today":
            return today, today, "today"
        if s == "yesterday":
            y = today - timedelta(days=1)
            return y, y, "yesterday"
        if s == "month":
            return today.replace(day=1), today, "month"
        if _MONTH_RE.match(s):
            first = date.fromisoformat(s + "-01")
            nxt = (
                date(first.year + 1, 1, 1)
                if first.month == 12
                else date(first.year, first.month + 1, 1)
            )
            return first, nxt - timedelta(days=1), s
        m = _RANGE_RE.match(s)
        if m and (m.group(1) or m.group(2)):
            start = date.fromisoformat(m.group(1)) if m.group(1) else date(2000, 1, 1)
            end = date.fromisoformat(m.group(2)) if m.group(2) else today
            if end < start:
                raise ValueError(f"period {spec!r} ends before it starts; write START..END")
            return start, end, s
        if re.fullmatch(_DATE, s):
            d = date.fromisoformat(s)
            return d, d, s
    except ValueError as exc:
        if "ends before" in str(exc):
            raise
        raise ValueError(f"invalid date in period {spec!r}: {exc}") from None
    raise ValueError(
        f"unknown period {spec!r}; expected today, yesterday, month, YYYY-MM, YYYY-MM-DD or "
        "YYYY-MM-DD..YYYY-MM-DD"
    )
