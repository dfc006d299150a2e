"""The ``companyd jobs`` table, printed from the rows the ``jobs`` result carries.

One printer for every front end that shows the routines as text: a daemon's answer
received as JSON (:func:`format_jobs_result`, the CLI's everyday ``jobs``) and the views
read from the stores without a daemon (:func:`companyd.scheduler._report.format_jobs`
hands over ``JobView.to_dict()``: the same rows a daemon sends). It reads the rows as they
are — ISO 8601 times, the 7-day figures under ``success_7d`` — so printing a daemon's answer
builds no record objects: no ``dataclasses`` (with ``inspect``, ~9 ms in 3.11) and no
scheduler records under ``companyd jobs`` (issue 31: ≤ 5× a bare ``python -c pass``).
Pure functions; nothing here imports more than the standard library's ``datetime`` and
the one formatter of times for people (:func:`companyd.admin.format_when`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from companyd.admin import format_when

__all__ = ["ago", "format_jobs_result", "format_rows", "local_time", "table", "utc_from_ts"]


def utc_from_ts(ts: float) -> datetime:
    """:func:`companyd.clock.utc_from_ts`, here so that printing a daemon's ``jobs`` answer
    does not import the clock (and asyncio with it).
    """
    return datetime.fromtimestamp(ts, tz=UTC)


def _ts(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def local_time(ts: float | None, tz: str, *, seconds: bool = False) -> str:
    """``ts`` in zone ``tz``, the zone named (:func:`companyd.admin.format_when`; ``—`` for
    None).
    """
    if ts is None:
        return "—"
    return format_when(ts, tz, seconds=seconds)


def ago(seconds: float) -> str:
    """A duration the way the tables show it: ``42s``, ``12m``, ``3.5h``, ``2.0d``."""
    seconds = abs(seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _rate(success: Mapping[str, Any]) -> str:
    due, ok = success["due"], success["ok"]
    if not due:  # RoutineStats.success_rate: None when nothing was due
        return "— (none due)"
    unverified = int(success.get("unverified") or 0)
    apart = f", {unverified} unverified" if unverified else ""
    return f"{ok / due * 100:.1f}% ({ok}/{due}{apart})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart, no trailing blanks."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def format_rows(
    rows: Sequence[Mapping[str, Any]], now: float, *, daemon: bool, tz: str | None = None
) -> str:
    """The ``companyd jobs`` table (plain text, one routine per line) of the ``jobs`` result's
    ``routines`` (:class:`companyd.admin.RoutineRow`), its times in ``tz`` (the company's
    zone; None: each routine's own, its schedule's).
    """
    if not rows:
        return "no routines in company.yaml (add some under 'routines:')"
    lines = []
    for v in rows:
        zone = tz or v["timezone"]
        next_fire, pending = _ts(v.get("next_fire")), _ts(v.get("catch_up_pending"))
        if not v["enabled"]:
            nxt = "disabled"
        elif v.get("paused"):
            nxt = f"paused: failed in a row (`companyd jobs resume {v['routine']}`)"
        elif pending is not None:
            nxt = f"at start (catch-up of {local_time(pending, zone)})"
        elif next_fire is None:
            nxt = "—"
        else:
            nxt = f"{local_time(next_fire, zone)} (in {ago(next_fire - now)})"
        last_fire = v.get("last")
        if not last_fire:
            last = "never fired"
        else:
            scheduled = _ts(last_fire["scheduled"])
            assert scheduled is not None  # every fire has its time
            last = f"{last_fire.get('outcome')} {ago(now - scheduled)} ago"
        in_progress = int(v.get("in_progress", 0))
        if in_progress and daemon:
            last += f" · {in_progress} running/waiting"
        elif in_progress:  # no daemon here runs them: open in the history, not running
            last += f" · {in_progress} not closed (no daemon here; see jobs history)"
        lines.append((v["routine"], v["agent"], v["schedule"], nxt, last, _rate(v["success_7d"])))
    text = table(("ROUTINE", "AGENT", "SCHEDULE", "NEXT FIRE", "LAST", "7-DAY SUCCESS"), lines)
    if not daemon:
        text += (
            "\n(read from the saved history; next fire times computed from company.yaml and "
            "each routine's saved schedule position)"
        )
    return text


def format_jobs_result(result: Mapping[str, Any], now: float, tz: str | None = None) -> str:
    """The table for a ``jobs()`` result received as JSON (control socket), times in ``tz``."""
    return format_rows(
        result["routines"], now, daemon=bool(result.get("daemon", result.get("live"))), tz=tz
    )
