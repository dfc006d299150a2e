"""Admin results for a phone screen: ``/status``, ``/jobs``, ``/spend``, ``/budget``,
``/quarantine`` and any other result.

Each takes a result's JSON form (:func:`companyd.admin._wire.result_data`), the data the CLI
gets over the control socket. :func:`format_status`, :func:`format_jobs`,
:func:`format_spend` and :func:`format_budget` pick the few lines that matter from the
daemon's ``status()``, ``jobs()``, ``spend()`` and ``budget()``; :func:`format_result`
shows any other :class:`~companyd.admin.Admin` result as compact indented text. Total like the alert
renderers: a result of another shape still reads, and every text fits one message.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from companyd.admin import (
    channels_health,
    format_usd,
    reload_lines,
    status_line,
    table_places,
    telegram_health,
)
from companyd.alerts._render import clip
from companyd.alerts._values import has, line, num, pct, secs, times_in, txt, usd, usd_of, when

__all__ = [
    "format_budget",
    "format_jobs",
    "format_quarantine",
    "format_result",
    "format_spend",
    "format_status",
]


def format_result(title: str, result: Any, max_lines: int = 80) -> str:
    """A compact, indented text of an :class:`~companyd.admin.Admin` result dict.

    Keys ending in ``usd`` show as dollars, ``*_ts``/``*_at`` epoch numbers as UTC times,
    ``*pct``/``*_rate``/``level`` fractions as percentages; nesting is shown with two
    spaces, lists of scalars on one line. Long results are cut with a note.
    """
    lines = [title] if title else []
    lines += _compact(result, 0)
    if len(lines) > max_lines:
        lines = [*lines[:max_lines], f"… {len(lines) - max_lines} more lines"]
    return clip("\n".join(lines))


def format_jobs(result: Any) -> str:
    """``Admin.jobs()`` for a phone: one short block per routine — who, schedule, next fire,
    last outcome and the 7-day success rate — instead of every field of every routine (a
    dozen routines would not fit a message). Falls back to :func:`format_result` for a
    result without a ``routines`` list.
    """
    routines = result.get("routines") if isinstance(result, Mapping) else None
    if not isinstance(routines, list):
        return format_result("⏰ routines", result)
    lines = ["⏰ routines"]
    for r in routines:
        if not isinstance(r, Mapping):
            continue
        name = txt(r.get("routine") or r.get("name"), 60)
        head = f"• {name}"
        if has(r, "agent"):
            head += f" → {txt(r.get('agent'), 40)}"
        if has(r, "schedule"):
            head += f" · {txt(r.get('schedule'), 60)}"
        lines.append(head)
        if r.get("enabled") is False:
            lines.append("  disabled")
            continue
        if has(r, "paused"):  # pause_after_failures
            lines.append(f"  ⏸ paused after failed runs: `companyd jobs resume {name}`")
        nxt = r.get("next_fire") or r.get("next_fire_ts")
        detail = [f"next {when(nxt)}" if nxt else "not scheduled"]
        if has(r, "catch_up_pending"):
            detail.append("catch-up due at start")
        last = r.get("last")
        if isinstance(last, Mapping) and has(last, "outcome"):
            detail.append(f"last {txt(last.get('outcome'), 30)}")
        elif "last" in r:
            detail.append("never fired")
        rate = r.get("success_7d")
        if isinstance(rate, Mapping) and num(rate.get("due")):
            detail.append(
                f"7d {pct(rate.get('rate'), rate.get('ok'), rate.get('due'))} "
                f"({txt(rate.get('ok'))}/{txt(rate.get('due'))})"
            )
        lines.append("  " + " · ".join(detail))
        if isinstance(last, Mapping) and last.get("outcome") not in (None, "ok", "idle"):
            lines += ["  " + x for x in line("why", last, "reason")]
    if len(lines) == 1:
        lines.append("no routines")
    return clip("\n".join(lines))


def format_spend(result: Any) -> str:
    """``Admin.spend()`` for a phone: one line per agent (model, routine or day) with its
    cost and calls, most expensive first as the ledger reports them, then the total —
    with ``(simulated)`` for what the offline model's calls make — instead of every token
    count of every row. Falls back to :func:`format_result` for a result of another shape.
    """
    if not isinstance(result, Mapping) or not isinstance(result.get("rows"), list):
        return format_result("💵 spend", result)
    period: Mapping[str, Any] = (
        result["period"] if isinstance(result.get("period"), Mapping) else {}
    )
    label, first, last = period.get("label"), period.get("from"), period.get("to")
    dates = f"{first}" if first == last else f"{first} – {last}"
    lines = [f"💵 spend by {txt(result.get('by'), 20)}, {txt(label, 40)} ({dates})"]
    rows = [r for r in result["rows"] if isinstance(r, Mapping)]
    total = result.get("total") if isinstance(result.get("total"), Mapping) else None
    # one precision for the message, as the spend CLI's table: cents would show a
    # $0.0053 call as $0.01
    places = table_places([_cost(r) for r in [*rows, *([total] if total else [])]])
    for row in rows:
        key = row.get("key")
        name = txt(key, 60) if key is not None else "(no routine)"
        if has(row, "day"):
            name = f"{txt(row.get('day'), 12)} {name}"
        lines.append(f"• {name} — {_money(row, places)} · {_calls(row.get('calls'))}")
    if total is not None:
        lines.append(f"total {_money(total, places)} · {_calls(total.get('calls'))}")
    else:
        lines.append("nothing spent")
    if has(result, "note"):
        lines.append(txt(result.get("note"), 300))
    return clip("\n".join(lines))


def _cost(row: Mapping[str, Any]) -> float | None:
    """A spend row's cost, exact where the report has it (``cost_usd`` is in cents)."""
    exact = row.get("cost_usd_exact")
    return num(exact) if exact is not None else num(row.get("cost_usd"))


def _money(row: Mapping[str, Any], places: int) -> str:
    """A spend row's cost, with the part the offline model's calls make (no money spent)."""
    cost, simulated = _cost(row), num(row.get("simulated_usd")) or 0.0
    if cost is None:
        return "$?"
    shown = format_usd(cost, places)
    if simulated > 0:
        part = format_usd(simulated, places)
        shown += " (simulated)" if simulated >= cost else f" ({part} simulated)"
    return shown


def _calls(value: Any) -> str:
    n = num(value)
    return "? calls" if n is None else f"{n:,.0f} call{'s' if n != 1 else ''}"


def format_budget(result: Any) -> str:
    """``Admin.budget()`` for a phone: one line per scope (the company, then each agent,
    department and routine with a budget of its own) with today's and this month's use of
    its limit, a refusal (``⛔``) and a raise of today's limit where there is one — instead
    of every field of every row. Falls back to :func:`format_result` for a result of another
    shape.
    """
    rows = result.get("budgets") if isinstance(result, Mapping) else None
    if not isinstance(rows, list):
        return format_result("💰 budgets", result)
    lines = [f"💰 budgets ({txt(result.get('timezone'), 40)})"]
    scopes: dict[str, list[str]] = {}
    notes: list[str] = []
    for row in rows:
        if not isinstance(row, Mapping):
            continue
        scope = str(row.get("agent") or row.get("scope") or "?")
        if scope.startswith("agent:"):
            scope = scope[len("agent:") :]
        parts = scopes.setdefault(scope, [])
        if row.get("limit_usd") is None:  # no budget of its own: what it used, and why
            today, month = usd(row.get("used_today_usd")), usd(row.get("used_month_usd"))
            used = f"today {today} · month {month}"
            parts.append(used + (f" ({txt(row.get('note'), 120)})" if has(row, "note") else ""))
            continue
        period = {"day": "today", "month": "month"}.get(str(row.get("period")), "?")
        part = f"{period} {usd_of(row.get('used_usd'), row.get('limit_usd'))}"
        if num(row.get("raised_today_usd")):
            part += f" (+{usd(row.get('raised_today_usd'))} raised)"
        parts.append(part)
        if has(row, "blocked"):
            notes.append(f"⛔ {scope} {period}: {txt(row.get('blocked'), 200)}")
    for scope, parts in scopes.items():
        lines.append(f"• {scope}: {' · '.join(parts)}")
    return clip("\n".join(lines + notes))


def format_quarantine(data: Mapping[str, Any]) -> str:
    """``/quarantine``: one line per quarantined task — its id, agent, crashes and last
    error — and how to run it again; a result of another shape as its fields.
    """
    tasks = data.get("tasks")
    if not isinstance(tasks, list):
        return format_result("🧊 quarantined tasks", data)
    if not tasks:
        return "🧊 no quarantined tasks"
    lines = ["🧊 quarantined tasks (a task whose runs crashed its agent again and again)"]
    for t in tasks:
        if not isinstance(t, Mapping):
            continue
        errors = t.get("errors")
        last = errors[-1] if isinstance(errors, list) and errors else None
        lines.append(
            f"• {txt(t.get('id'), 40)} — {txt(t.get('agent'), 40)}, "
            f"{txt(t.get('crashes'), 10)} crash(es)" + (f": {txt(last, 200)}" if last else "")
        )
    lines.append("run one again: /retry TASK_ID")
    return clip("\n".join(lines))


def format_status(status: Any, max_routines: int = 5) -> str:
    """``/status`` for a phone: the daemon's ``status()`` dict (docs/daemon.md) in a few
    short lines — the headline, every supervision-tree node that is not plainly running or
    was restarted, runs in flight, this month's spend and the next routines.

    Total like the rest of this module: a dict of another shape falls back to
    :func:`format_result`, and missing or mistyped keys are left out.
    """
    if not isinstance(status, Mapping) or not isinstance(status.get("tree"), Mapping):
        return format_result("📊 status", status)

    def m(value: Any) -> Mapping[str, Any]:
        return value if isinstance(value, Mapping) else {}

    def rows(value: Any) -> list[Mapping[str, Any]]:
        return [r for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []

    daemon, company = m(status.get("daemon")), m(status.get("company"))
    head = f"📊 {txt(company.get('name') or 'companyd', 80)} — {txt(daemon.get('state'), 20)}"
    if num(daemon.get("uptime_s")) is not None:
        head += f", up {secs(daemon.get('uptime_s'))}"
    if daemon.get("offline") is True:
        head += " · OFFLINE model"
    lines = [head, status_line(status)]
    now = num(status.get("now")) or time.time()
    tz = txt(m(status.get("company")).get("timezone") or "UTC", 60)
    lines += [txt(x, 400) for x in reload_lines(daemon, now, tz)]
    alerts = m(status.get("alerts"))
    if alerts:
        health = telegram_health(alerts, now, tz)
        if health != "ok":
            lines.append(f"telegram: {txt(health, 300)}")
        # the other channels, when one is not fine: the founder hears of it here
        channels = rows(alerts.get("channels"))
        if any(c.get("state") != "ok" for c in channels):
            lines.append(f"channels: {txt(channels_health(channels, now, tz), 300)}")

    trouble: list[str] = []

    def walk(node: Mapping[str, Any]) -> None:
        state, restarts = node.get("state"), num(node.get("restarts")) or 0
        if state != "running" or restarts:
            text = f"  {txt(node.get('id'), 40)}: {txt(state, 20)}"
            if node.get("paused_until"):  # a quota wall: "paused until 14:35 (rate limit)"
                text += f" until {txt(node.get('paused_until'), 10)}"
            if node.get("pause_reason"):
                text += f" ({txt(node.get('pause_reason'), 20)})"
            if restarts:
                text += f", restarted {restarts:.0f}×"
            if node.get("last_exit") and state != "running":
                text += f", last exit: {txt(node.get('last_exit'), 120)}"
            trouble.append(text)
        for child in rows(node.get("children")):
            walk(child)

    walk(m(status.get("tree")))
    if trouble:
        lines += ["not plainly running:", *trouble[:15]]
        if len(trouble) > 15:
            lines.append(f"  … {len(trouble) - 15} more")
    runs = rows(status.get("runs_in_flight"))
    if runs:
        lines.append("runs in flight:")
    for r in runs[:5]:
        lines.append(
            f"  ▶ {txt(r.get('agent'), 40)} {txt(r.get('run_id'), 40)} "
            f"{txt(r.get('routine') or r.get('source'), 60)} {secs(r.get('elapsed_s'))} "
            f"{usd(r.get('cost_usd'))}"
        )
    month = m(m(status.get("spend")).get("month"))
    if num(month.get("used_usd")) is not None:
        limit = month.get("limit_usd")
        of = f" of {usd(limit)}" if num(limit) else ""
        lines.append(f"this month: {usd(month.get('used_usd'))}{of}")
    routines = rows(status.get("routines"))
    routines.sort(key=lambda r: num(r.get("next_fire")) or math.inf)
    if routines:
        lines.append("next routines:")
        for r in routines[:max_routines]:
            last = f" (last: {txt(r.get('last_outcome'), 20)})" if r.get("last_outcome") else ""
            with times_in(tz):  # the company's clock, as the lines above it
                nxt = when(r.get("next_fire")) if r.get("next_fire") else "not scheduled"
            lines.append(f"  {nxt} {txt(r.get('routine'), 60)} → {txt(r.get('agent'), 40)}{last}")
    return clip("\n".join(lines))


def _scalar(key: str, value: Any) -> str:
    k = key.lower()
    n = num(value) if not isinstance(value, str) else None
    if n is not None:
        if k.endswith("usd") or k in ("cost", "spend", "limit", "used", "remaining"):
            return usd(n)
        if (k.endswith(("_ts", "_at")) or k in ("ts", "next_fire", "last_fire")) and n > 1e9:
            return when(n)
        if k.endswith(("pct", "_rate", "_ratio")) or k == "level":
            return pct(n)
        if isinstance(value, float):
            return f"{value:.4g}"
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return txt(value, 200)


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, dict | list | tuple)


def _compact(obj: Any, depth: int, key: str = "") -> list[str]:
    pad = "  " * depth
    if isinstance(obj, dict):
        if not obj:
            return [f"{pad}(none)"]
        out: list[str] = []
        for k, v in obj.items():
            ks = str(k)
            if _is_scalar(v):
                out.append(f"{pad}{ks}: {_scalar(ks, v)}")
            elif isinstance(v, list | tuple) and all(_is_scalar(x) for x in v):
                out.append(f"{pad}{ks}: {', '.join(_scalar(ks, x) for x in v) or '(none)'}")
            elif depth >= 3:
                out.append(f"{pad}{ks}: {txt(v, 200)}")
            else:
                out.append(f"{pad}{ks}:")
                out += _compact(v, depth + 1, ks)
        return out
    if isinstance(obj, list | tuple):
        if not obj:
            return [f"{pad}(none)"]
        out = []
        for item in obj:
            if isinstance(item, dict) and all(_is_scalar(v) for v in item.values()):
                out.append(
                    f"{pad}• " + ", ".join(f"{k}={_scalar(str(k), v)}" for k, v in item.items())
                )
            elif _is_scalar(item):
                out.append(f"{pad}• {_scalar(key, item)}")
            else:
                out.append(f"{pad}•")
                out += _compact(item, depth + 1, key)
        return out
    return [f"{pad}{_scalar(key, obj)}"]
