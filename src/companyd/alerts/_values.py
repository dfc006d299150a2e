"""Total value formatting for alert texts: anything in, a short readable string out.

Event data comes from many publishers and is a ``dict`` of whatever they sent, so every
helper here accepts any value — ``None``, a wrong type, NaN, a huge string — and returns
*some* text rather than raising. Pure: no I/O, no clock reads.

Times are shown in the company's zone (:func:`times_in`, set by whoever renders a message for
the founder: :func:`companyd.alerts._render_kinds.render`, the replies to commands), so a
message never gives one moment on two clocks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, tzinfo
from typing import Any

from companyd.admin import RUN_COST_PLACES, format_usd, format_when, one_usd, usd_places

__all__ = ["Data", "has", "line", "num", "pct", "secs", "times_in", "txt", "usd", "usd_of", "when"]

#: The zone :func:`when` shows times in (a context variable: each render sets its own).
_SHOWN_IN: ContextVar[tzinfo | str] = ContextVar("companyd_alerts_shown_in", default="UTC")

#: An event's data, as published (any shape).
Data = Mapping[str, Any]


def txt(value: Any, limit: int = 300) -> str:
    """``value`` as one line of at most ``limit`` characters (cut with ``…``): None is ``?``, a
    whole float has no ``.0``, a list is joined with commas, a dict is JSON. Multi-line text keeps
    its lines.
    """
    if value is None:
        return "?"
    if isinstance(value, str):
        s = value
    elif isinstance(value, float) and value.is_integer():
        s = str(int(value))
    elif isinstance(value, list | tuple):
        s = ", ".join(txt(v, 80) for v in value)
    elif isinstance(value, dict):
        s = json.dumps(value, ensure_ascii=False, default=str)
    else:
        s = str(value)
    s = " ".join(s.split()) if "\n" not in s else s.strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def num(value: Any) -> float | None:
    """``value`` as a finite float, or None: numbers, and strings such as ``"$1.50"`` or
    ``"80%"``; a bool is not a number.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            f = float(value.strip().lstrip("$").rstrip("%"))
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def usd(value: Any, *, minimum: int = 2) -> str:
    """Dollars as one amount is said (``$1.23``, ``$1,234.00``, ``$0.0068``: exact to a
    millionth, no exponent, never a spend shown as ``$0.00``; :func:`companyd.admin.one_usd`),
    with at least ``minimum`` decimals, or ``$?`` when ``value`` is not a number.
    """
    n = num(value)
    if n is None:
        return "$?"
    return one_usd(n, minimum)


def usd_of(used: Any, limit: Any) -> str:
    """``$USED of $LIMIT``, each exact to a millionth (``$0.707 of $0.50``, ``$0.0035 of
    $0.004``, ``$0.008224 of $10.00``): two different amounts never read alike, and a
    small spend beside a large budget is not padded to ``$10.000000``.
    """
    return f"{usd(used)} of {usd(limit)}"


def run_cost(value: Any) -> str:
    """A run's cost as ``companyd runs`` prints it (``$0.0123``: at least
    :data:`~companyd.admin.RUN_COST_PLACES` decimals, more only so that it is not zero).
    """
    n = num(value)
    if n is None:
        return "$?"
    return format_usd(n, usd_places([n], minimum=RUN_COST_PLACES))


def result_cost(data: Mapping[str, Any]) -> str:
    """The cost of a result's run (``data``: a ``routine_result``'s, or an answer's) as its
    messages show it: :func:`run_cost`, and ``(simulated)`` after it for a run on the
    offline model, as ``companyd runs last`` prints it — no money was spent on it.
    """
    cost = run_cost(data.get("cost_usd"))
    return f"{cost} (simulated)" if data.get("offline") is True else cost


def pct(level: Any, used: Any = None, limit: Any = None) -> str:
    """A percentage (``80%``) of ``level`` (a fraction; a value over 1.5 is taken as already in
    percent), else of ``used / limit``; ``?%`` when neither is known.
    """
    n = num(level)
    if n is None:
        u, lim = num(used), num(limit)
        if u is not None and lim:
            n = u / lim
    if n is None:
        return "?%"
    if n > 1.5:  # a percentage given as 80 rather than 0.8
        n /= 100
    return f"{n * 100:.0f}%"


def secs(value: Any) -> str:
    """A duration in seconds as ``45 s``, ``12 min`` or ``3.5 h``; ``?`` when not a number."""
    n = num(value)
    if n is None:
        return "?"
    if n < 120:
        return f"{n:.0f} s"
    if n < 7200:
        return f"{n / 60:.0f} min"
    return f"{n / 3600:.1f} h"


def has(data: Data, key: str) -> bool:
    """Whether ``data`` has ``key`` with a value worth showing (not None, ``""`` or ``[]``)."""
    v = data.get(key)
    return v is not None and v != "" and v != []


def line(label: str, data: Data, key: str, fmt: Callable[[Any], str] = txt) -> list[str]:
    """``["<label>: <value>"]`` with the value formatted by ``fmt``, or ``[]`` when ``data`` has
    nothing under ``key``: splice it into a list of lines.
    """
    return [f"{label}: {fmt(data.get(key))}"] if has(data, key) else []


@contextmanager
def times_in(tz: tzinfo | str) -> Iterator[None]:
    """Within the block, :func:`when` shows times in ``tz`` (the company's zone, or its name)."""
    token = _SHOWN_IN.set(tz)
    try:
        yield
    finally:
        _SHOWN_IN.reset(token)


def when(value: Any) -> str:
    """An epoch time (a number, or an ISO 8601 string with a zone) as ``YYYY-MM-DD HH:MM CET``
    in the zone of :func:`times_in` (UTC outside one), named as the alert's footer names it
    (:func:`companyd.admin.format_when`); anything else as short text.
    """
    n = num(value)
    if n is None and isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            n = parsed.timestamp()
    if n is not None and n > 1e9:
        shown = format_when(n, _SHOWN_IN.get())
        if shown != "-":  # past year 9999: not a time anything here wrote; show it as it is
            return shown
    return txt(value, 60)
