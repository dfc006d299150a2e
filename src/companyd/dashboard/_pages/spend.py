"""The Spend page (``/spend``) and its CSV export (``/spend.csv``).

``/spend?period=…`` (``month`` by default; any period ``companyd spend --period`` takes:
``today``, ``yesterday``, ``month``, ``YYYY-MM``, ``YYYY-MM-DD``, ``DATE..DATE``) shows,
all from :class:`~companyd.admin.Admin`:

* spend per day stacked by agent (``spend(by="agent", per_day=True)``), drawn by the
  vendored chart library from the element's ``data-stacked`` JSON (days as epoch seconds,
  one series per agent, the company's daily budget as a line once some day comes within a
  fifth of it — else the bars would be flat on the axis) with the same numbers in a
  table beside it (the chart is an image to assistive technology; the table is the data);
* spend per model and per routine over the period (``spend(by=…)``);
* each budget (``budget()``): limit, used, reserved, remaining, reset, as meters.

``/spend.csv?period=…&by=agent|model|routine`` downloads one row per day and key (``day,
key, calls``, the token counts, ``cost_usd``) — ``Content-Disposition: attachment`` with a
file name saying what it holds. A period the daemon refuses is a 400 naming the valid
forms (the page shows it above empty tables).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from datetime import date, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from companyd.admin import AdminError
from companyd.dashboard._context import ctx_of
from companyd.dashboard._render import render
from companyd.errors import CompanydError

__all__ = ["CSV_COLUMNS", "LIMIT_DRAWN_AT", "MAX_CHART_DAYS", "PERIODS", "routes", "stacked_series"]

#: The period choices offered (any other period can be typed in the URL or the field).
PERIODS: tuple[tuple[str, str], ...] = (
    ("month", "this month"),
    ("today", "today"),
    ("yesterday", "yesterday"),
)
#: A period longer than this is charted on the days with spend only.
MAX_CHART_DAYS = 400
#: The daily budget is drawn as a line once some day's spend reaches this share of it.
LIMIT_DRAWN_AT = 0.2
#: The CSV's columns, in order.
CSV_COLUMNS = (
    "day",
    "key",
    "calls",
    "input_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "cache_read_tokens",
    "output_tokens",
    "cost_usd",
)
_GROUPS = ("agent", "model", "routine")


def _days(first: str, last: str, rows: list[dict[str, Any]]) -> list[str]:
    """Every day of the period (or, over :data:`MAX_CHART_DAYS`, those with spend)."""
    start, end = date.fromisoformat(first), date.fromisoformat(last)
    if (end - start).days >= MAX_CHART_DAYS:
        return sorted({str(r["day"]) for r in rows})
    return [(start + timedelta(days=n)).isoformat() for n in range((end - start).days + 1)]


def stacked_series(report: Any, limit: float | None) -> dict[str, Any]:
    """The per-day report (``spend(by, per_day=True)``) as the chart's data: ``days``
    (ISO dates), ``epochs`` (UTC midnight of each), ``groups`` (the keys, most expensive
    first), ``usd`` (one list per group, a value per day), ``totals`` (per day), ``limit``
    and ``limit_drawn`` (whether some day came within :data:`LIMIT_DRAWN_AT` of it).
    """
    days = _days(report.period["from"], report.period["to"], report.rows)
    index = {d: i for i, d in enumerate(days)}
    per_key: dict[str, float] = {}
    for r in report.rows:
        key = str(r["key"]) if r["key"] is not None else "(none)"
        per_key[key] = per_key.get(key, 0.0) + float(r["cost_usd"])
    keys = sorted(per_key, key=lambda k: (-per_key[k], k))
    usd = {k: [0.0] * len(days) for k in keys}
    for r in report.rows:
        key = str(r["key"]) if r["key"] is not None else "(none)"
        if str(r["day"]) in index:
            usd[key][index[str(r["day"])]] += float(r["cost_usd"])
    epoch0 = date(1970, 1, 1)
    totals = [round(sum(usd[k][i] for k in keys), 9) for i in range(len(days))]
    # a budget line far above every bar would flatten them into the axis: drawn only when
    # some day came within LIMIT_DRAWN_AT of it (the caption says so otherwise)
    drawn = limit is not None and max(totals, default=0.0) >= limit * LIMIT_DRAWN_AT
    return {
        "days": days,
        "epochs": [(date.fromisoformat(d) - epoch0).days * 86400 for d in days],
        "groups": keys,
        "usd": [usd[k] for k in keys],
        "totals": totals,
        "limit": limit,
        "limit_drawn": drawn,
    }


def _daily_limit(budgets: Sequence[Mapping[str, Any]]) -> float | None:
    row = next((b for b in budgets if b.get("agent") is None and b.get("period") == "day"), None)
    return float(row["configured_usd"]) if row and row.get("configured_usd") else None


async def spend_page(request: Request) -> Response:
    """Spend over the period: per day by agent, per model, per routine, and the budgets."""
    admin = ctx_of(request).admin
    period = (request.query_params.get("period") or "month").strip()
    try:
        budget = await admin.budget()
        daily = await admin.spend(by="agent", period=period, per_day=True)
        by_model = await admin.spend(by="model", period=period)
        by_routine = await admin.spend(by="routine", period=period)
    except CompanydError as exc:  # a refused period, or the ledger unreadable (a full disk)
        return render(
            request,
            "spend.html",
            status_code=400 if isinstance(exc, AdminError) else 503,
            error=str(exc),
            period=period,
            periods=PERIODS,
            budgets=[],
            budget=None,
            series=None,
            chart="",
            by_model=None,
            by_routine=None,
        )
    series = stacked_series(daily, _daily_limit(budget.budgets))
    chart = json.dumps(
        {
            **{k: series[k] for k in ("epochs", "groups", "usd")},
            "limit": series["limit"] if series["limit_drawn"] else None,
        }
    )
    return render(
        request,
        "spend.html",
        error="",
        period=period,
        periods=PERIODS,
        label=daily.period,
        total=daily.total,
        series=series,
        chart=chart,
        by_model=by_model,
        by_routine=by_routine,
        budget=budget,
        budgets=budget.budgets,
    )


async def spend_csv(request: Request) -> Response:
    """One CSV row per day and key over the period, as a download."""
    period = (request.query_params.get("period") or "month").strip()
    by = (request.query_params.get("by") or "agent").strip()
    if by not in _GROUPS:
        return PlainTextResponse(
            f"cannot export spend by {by!r}; choose one of {', '.join(_GROUPS)}\n", 400
        )
    try:
        report = await ctx_of(request).admin.spend(by=by, period=period, per_day=True)
    except AdminError as exc:
        return PlainTextResponse(f"{exc}\n", 400)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for r in report.rows:
        row = {**r, "key": "" if r["key"] is None else r["key"], "cost_usd": r["cost_usd_exact"]}
        writer.writerow([row[c] for c in CSV_COLUMNS])
    span = report.period["from"]
    if report.period["to"] != span:
        span += "_" + report.period["to"]
    name = f"companyd-spend-by-{by}-{span}.csv"
    return Response(
        out.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"content-disposition": f'attachment; filename="{name}"'},
    )


routes: list[BaseRoute] = [
    Route("/spend", spend_page, methods=["GET"], name="spend"),
    Route("/spend.csv", spend_csv, methods=["GET"], name="spend_csv"),
]
