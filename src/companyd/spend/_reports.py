"""Spend reports from the ledger's running totals, and their text rendering.

Shared by :meth:`companyd.spend._book.SpendBook.spend_report` (in the daemon) and the
``companyd spend`` / ``companyd budget`` commands (reading the ledger directly).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from companyd.admin import format_usd, one_usd, table_places
from companyd.spend._periods import parse_period

if TYPE_CHECKING:  # TypedDicts: their module imports pydantic (`companyd spend`, issue 31)
    from companyd.admin import SpendReportData, SpendTotals
    from companyd.spend._ledger import Ledger

__all__ = [
    "GROUPINGS",
    "format_budget_report",
    "format_spend_report",
    "spend_report",
    "table_places",
]

#: Valid ``by`` values.
GROUPINGS = ("agent", "model", "routine", "day")


def spend_report(
    ledger: Ledger, by: str, period: str, today: date, *, per_day: bool = False
) -> SpendReportData:
    """Spend grouped ``by`` over ``period`` (see :func:`~companyd.spend._periods.parse_period`);
    ``per_day``: one row per day and key, each with its ``day`` (by date, then most
    expensive first), for spend per day stacked by agent, model or routine.

    Raises:
        ValueError: an unknown grouping or period, naming the valid ones.
    """
    # here, not at the top: printing a report the daemon built (`companyd spend` beside a
    # running daemon) needs only the formatters below, not the ledger (issue 31)
    from companyd.spend._ledger import Totals, from_pusd

    if by not in GROUPINGS:
        raise ValueError(f"cannot group spend by {by!r}; expected one of {', '.join(GROUPINGS)}")
    first, last, label = parse_period(period, today)
    days: list[str] = []
    if by == "day":
        rows = ledger.days_between(first.isoformat(), last.isoformat())
    elif per_day:
        pairs = ledger.per_day_between(by, first.isoformat(), last.isoformat())
        days = [day for day, _ in pairs]
        rows = [totals for _, totals in pairs]
    else:
        keys = ledger.day_keys_between(first.isoformat(), last.isoformat())
        rows = ledger.totals(by, keys)
    total = Totals(
        key="total",
        calls=sum(r.calls for r in rows),
        input_tokens=sum(r.input_tokens for r in rows),
        cache_write_5m_tokens=sum(r.cache_write_5m_tokens for r in rows),
        cache_write_1h_tokens=sum(r.cache_write_1h_tokens for r in rows),
        cache_read_tokens=sum(r.cache_read_tokens for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        cost_pusd=sum(r.cost_pusd for r in rows),
    )
    simulated = ledger.simulated_between(by, first.isoformat(), last.isoformat())
    per_day_simulated = (
        _simulated_per_day(ledger, by, first.isoformat(), last.isoformat()) if days else {}
    )
    out_rows: list[SpendTotals] = []
    for i, r in enumerate(rows):
        d = r.to_dict()
        sim = per_day_simulated.get((days[i], r.key), 0) if days else simulated.get(r.key, 0)
        d["simulated_usd"] = float(round(from_pusd(sim), 9))
        if by == "routine" and d["key"] == "":
            d["key"] = None  # calls outside any routine (operator questions, consultations)
        out_rows.append({"day": days[i], **d} if days else d)
    total_sim = float(round(from_pusd(sum(simulated.values())), 9))
    return {
        "by": by,
        "period": {"label": label, "from": first.isoformat(), "to": last.isoformat()},
        "rows": out_rows,
        "total": total.to_dict() | {"key": None, "simulated_usd": total_sim},
    }


def _simulated_per_day(
    ledger: Ledger, by: str, first: str, last: str
) -> dict[tuple[str, str], int]:
    """Simulated picodollars by (day, key) for a per-day report."""
    out: dict[tuple[str, str], int] = {}
    for day in ledger.day_keys_between(first, last):
        for key, pusd in ledger.simulated_between(by, day, day).items():
            out[(day, key)] = pusd
    return out


def _money(value: float | str | None, places: int = 2) -> str:
    if value is None:
        return "-"
    return format_usd(Decimal(str(value)), places)


def _when(iso: str) -> str:
    """``2026-11-23T00:00:00+05:45`` → ``2026-11-23 00:00``."""
    return str(iso).replace("T", " ")[:16]


def _tokens(n: int) -> str:
    if n >= 10_000_000:
        return f"{n / 1_000_000:.0f}M"
    if n >= 10_000:
        return f"{n / 1_000:.0f}k"
    return str(n)


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    lines = []
    for i, row in enumerate([header, *rows]):
        cells = [
            c.ljust(w) if j == 0 else c.rjust(w)
            for j, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_spend_report(report: Mapping[str, Any]) -> str:
    """The report as a text table, with a total line."""
    p = report["period"]
    span = p["from"] if p["from"] == p["to"] else f"{p['from']} .. {p['to']}"
    title = f"spend by {report['by']}, {p['label']} ({span})"
    if not report["rows"]:
        return f"{title}: no LLM calls recorded"
    header = [report["by"], "calls", "input", "cache write", "cache read", "output", "cost"]
    every = [*report["rows"], report["total"]]
    # one precision for the cost and the simulated columns, total included
    places = table_places(
        [r["cost_usd_exact"] for r in every] + [r.get("simulated_usd") for r in every]
    )
    simulated = any(r.get("simulated_usd") for r in every)
    if simulated:
        header.append("simulated")

    def line(r: dict[str, Any], key: str) -> list[str]:
        cells = [
            key,
            str(r["calls"]),
            _tokens(r["input_tokens"]),
            _tokens(r["cache_write_5m_tokens"] + r["cache_write_1h_tokens"]),
            _tokens(r["cache_read_tokens"]),
            _tokens(r["output_tokens"]),
            _money(r["cost_usd_exact"], places),
        ]
        if simulated:
            sim = float(r.get("simulated_usd") or 0.0)
            whole = sim and abs(sim - float(r["cost_usd"])) < 1e-9
            cells.append("all" if whole else (_money(sim, places) if sim else "-"))
        return cells

    rows = [line(r, "(none)" if r["key"] is None else str(r["key"])) for r in report["rows"]]
    rows.append(line(report["total"], "total"))
    text = f"{title}\n{_table(header, rows)}"
    if simulated:
        text += (
            "\nsimulated: the offline model's calls (companyd --offline), priced as Claude's "
            "would be — no money was spent on them"
        )
    return text


def format_budget_report(report: Mapping[str, Any]) -> str:
    """Each budget as one line of a text table."""
    header = ["budget", "period", "limit", "used", "reserved", "remaining", "resets"]
    rows = []
    notes = []
    places = table_places(
        v
        for b in report["budgets"]
        for k in ("limit_usd", "raised_today_usd", "used_usd", "reserved_usd", "remaining_usd")
        if isinstance(v := b.get(k), int | float | str)
    )

    for b in report["budgets"]:
        who = "company" if b["agent"] is None else str(b["agent"])
        if b["period"] is None:
            # said on its own, exact: never a false zero beside the table
            notes.append(f"{who}: {b['note']} (today {one_usd(b['used_today_usd'], places)})")
            continue
        limit = _money(b["limit_usd"], places)
        if b.get("raised_today_usd"):
            limit += f" (+{_money(b['raised_today_usd'], places)} today)"
        remaining = _money(b["remaining_usd"], places)
        if b.get("blocked"):
            remaining += " BLOCKED"
        rows.append(
            [
                who,
                f"{b['period']} {b['key']}",
                limit,
                f"{_money(b['used_usd'], places)} ({b['used_fraction']:.0%})",
                _money(b["reserved_usd"], places),
                remaining,
                _when(b["resets_at"]),
            ]
        )
    text = f"budgets (times in {report['timezone']}, now {_when(report['now'])})\n"
    text += _table(header, rows) if rows else "(no budgets)"
    if notes:
        text += "\n" + "\n".join(notes)
    return text
