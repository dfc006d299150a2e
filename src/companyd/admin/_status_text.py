"""``companyd status`` as text: the renderers shared by the CLI, the daemon's STATUS= line and
Telegram's /status.

They take the JSON form of the daemon's ``Admin.status`` result (docs/daemon.md, "status()
result"; ``companyd.admin._wire.result_data`` makes it) and are total: a key the daemon did
not send is left out, a mistyped one is shown as missing, never a crash (an older daemon may
answer a newer CLI). Layer 1: imports nothing from the package.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decimal import Decimal

__all__ = [
    "as_list",
    "as_mapping",
    "as_number",
    "as_text",
    "channels_health",
    "exact_places",
    "format_duration",
    "format_usd",
    "format_when",
    "one_usd",
    "reload_lines",
    "render_status",
    "status_line",
    "table_places",
    "telegram_health",
    "usd_places",
    "waiting_text",
]


def as_text(value: Any) -> str:
    """``value`` if it is a string, else ``""``: a missing or mistyped field shows as empty."""
    return value if isinstance(value, str) else ""


def as_number(value: Any) -> float | None:
    """``value`` as a float if it is a finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` as a list if it is a list or tuple, else an empty list."""
    return list(value) if isinstance(value, list | tuple) else []


def format_usd(value: float | Decimal | None, places: int = 2) -> str:
    """Dollars with thousands separators and ``places`` decimals (``$1,234.50``); ``-``
    for None. Pick ``places`` with :func:`usd_places`, once for a whole table.
    """
    if value is None:
        return "-"
    return f"${value:,.{places}f}"


def exact_places(value: float | Decimal, minimum: int = 2) -> int:
    """The decimals that print ``value`` exactly to a millionth of a dollar: at least
    ``minimum``, as many more as it has (``0.0068`` → 4), at most :data:`MAX_USD_PLACES`.
    """
    frac = f"{abs(float(value)):.{MAX_USD_PLACES}f}".partition(".")[2].rstrip("0")
    return max(minimum, len(frac))


def one_usd(value: float | Decimal, minimum: int = 2) -> str:
    """One amount in a sentence (a refusal, a raise, an alert's line): exact to a
    millionth of a dollar — at least ``minimum`` decimals, and as many more as the amount
    has (``$0.0068``, ``$1,000,005.0001``), never rounded into another figure; a non-zero
    amount under half a millionth is ``<$0.000001``, never a false zero.
    """
    v = float(value)
    if v and abs(v) < 5e-7:
        return "<$0.000001"
    return format_usd(v, exact_places(v, minimum))


#: The most decimals money is printed with (a millionth of a dollar).
MAX_USD_PLACES = 6
#: The fewest decimals of a run's cost where one is printed (`runs`, `jobs history`, a
#: result's footer): a run costs fractions of a cent.
RUN_COST_PLACES = 4
#: One unit of the last of ``places`` decimals, as a float: ``_UNITS[2] == 0.01``.
_UNITS = {places: float(f"1e-{places}") for places in range(MAX_USD_PLACES + 1)}


def usd_places(values: Iterable[float | Decimal | None], *, minimum: int = 2) -> int:
    """The fewest decimals, at least ``minimum``, with which every amount of ``values``
    that is not zero prints as not zero (a budget of $0.004 is "$0.004", never "$0.00");
    at most :data:`MAX_USD_PLACES`. One table takes one such precision for all its amounts.
    """
    places = minimum
    for v in values:
        if v is None:
            continue
        if (
            isinstance(v, int | float)
            and not isinstance(v, bool)
            and (v == 0 or abs(v) >= _UNITS.get(places, 0.0))
        ):
            # at least one unit of the last decimal (or zero): shows as it is at ``places``,
            # no decimal arithmetic needed (decimal's import is ~2 ms of `status`: issue 31)
            continue
        from decimal import Decimal

        d = abs(Decimal(str(v)))
        while d and places < MAX_USD_PLACES and d.quantize(Decimal(1).scaleb(-places)) == 0:
            places += 1
    return places


def table_places(values: Iterable[float | str | None]) -> int:
    """The decimals for the money of one table: four when any amount is under a dollar
    (calls cost fractions of a cent), else two — and more where that is what it takes for
    every amount that is not zero to show as not zero (:func:`usd_places`). The spend
    CLI's tables and ``/spend`` on Telegram share it.
    """
    from decimal import Decimal  # here: see usd_places

    amounts = [Decimal(str(v)) for v in values if v is not None]
    minimum = 4 if any(0 < abs(a) < 1 for a in amounts) else 2
    return usd_places(amounts, minimum=minimum)


def format_duration(seconds: float | None) -> str:
    """``3d 04h``, ``2h 03m``, ``5m 12s``, ``12s``."""
    if seconds is None:
        return "-"
    s = int(max(0.0, seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {s:02d}s"
    return f"{s}s"


def waiting_text(created: Any, deadline: Any, now: float, kind: Any = None) -> str:
    """How long a desk item has waited and when it expires — "waiting 3h 12m · expires in
    20h 48m (then denied)" — for ``inbox``, ``/inbox`` and the dashboard's inbox. An item
    without a deadline (a proposal, a quarantined task) shows its age only. A ``kept``
    result (``kind``) asks for nothing: unread by then, it leaves the inbox, denied nothing.
    """
    if kind == "kept":
        then, gone = "then it leaves the inbox", "expired: left the inbox unread"
    elif kind == "question":  # a question is not denied: its agent goes on without it
        then, gone = "then the agent goes on without an answer", "expired: unanswered"
    else:
        then, gone = "then denied", "expired: denied"
    made = as_number(created)
    ends = as_number(deadline)
    parts = []
    if made is not None:
        parts.append(f"waiting {format_duration(now - made)}")
    if ends is not None:
        if ends > now:
            parts.append(f"expires in {format_duration(ends - now)} ({then})")
        else:
            parts.append(gone)
    return " · ".join(parts)


def _zone(tz_name: str | tzinfo) -> tuple[tzinfo, str]:
    """The zone ``tz_name`` names and its name; UTC (and "UTC") for a name that is not one. A
    zone object is taken as it is. UTC itself is had without zoneinfo, whose imports cost a
    CLI command ~3 ms (issue 31).
    """
    if isinstance(tz_name, tzinfo):
        return tz_name, str(getattr(tz_name, "key", tz_name))
    if tz_name == "UTC":
        return UTC, tz_name
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz_name), tz_name
    except (ValueError, ZoneInfoNotFoundError):
        return UTC, "UTC"


def format_when(ts: float | None, tz_name: str | tzinfo, *, seconds: bool = False) -> str:
    """``ts`` as ``YYYY-MM-DD HH:MM <zone>`` in ``tz_name`` (a zone's name or the zone; UTC if
    the name is unknown), the zone as its abbreviation at that moment (``CET``, ``CEST``,
    ``UTC``) — as the footer of an alert says it; ``:SS`` too with ``seconds``. ``-`` for None
    or a timestamp out of range.

    The one way a time is shown to a person (alerts, channels, the CLI's tables, the
    dashboard, doctor): always in the company's zone, named. Machines (``--json``, logs,
    webhook payloads) get UTC ISO 8601 instead.
    """
    if ts is None:
        return "-"
    tz, _ = _zone(tz_name)
    try:
        at = datetime.fromtimestamp(ts, tz=tz)
    except (OverflowError, OSError, ValueError):
        return "-"
    return at.strftime("%Y-%m-%d %H:%M:%S %Z" if seconds else "%Y-%m-%d %H:%M %Z")


def status_line(status: Mapping[str, Any]) -> str:
    """A one-line summary of a status dict, e.g. for ``STATUS=`` or a chat message:
    ``8/8 agents up, 1 paused · 2 runs in flight · $1.23 of $10.00 today``.
    """
    parts: list[str] = []
    agents = as_mapping(status.get("agents"))
    total, up = as_number(agents.get("total")), as_number(agents.get("running"))
    if total is not None and up is not None:
        text = f"{int(up)}/{int(total)} agents up"
        paused = as_number(agents.get("paused"))
        if paused:
            text += f", {int(paused)} paused"
        parts.append(text)
    runs = status.get("runs_in_flight")
    if isinstance(runs, list):
        parts.append(f"{len(runs)} run{'s' if len(runs) != 1 else ''} in flight")
    today = as_mapping(as_mapping(status.get("spend")).get("today"))
    used, limit = as_number(today.get("used_usd")), as_number(today.get("limit_usd"))
    if used is not None:
        # each amount exact, as a sentence says money ("$0.000966 of $10.00 today")
        text = f"{one_usd(used)} of {one_usd(limit)} today" if limit else f"{one_usd(used)} today"
        if as_number(today.get("simulated_usd")):
            text += " (simulated)"
        parts.append(text)
    state = as_text(as_mapping(status.get("daemon")).get("state"))
    if state and state != "running":
        parts.insert(0, state)
    return " · ".join(parts) if parts else "running"


def _clock_time(ts: float, now: float, tz_name: str) -> str:
    """``10:02`` on the day of ``now`` (in ``tz_name``), else ``2026-11-24 10:02``."""
    tz, _ = _zone(tz_name)
    try:
        at, today = datetime.fromtimestamp(ts, tz=tz), datetime.fromtimestamp(now, tz=tz)
    except (OverflowError, OSError, ValueError):
        return "?"
    return at.strftime("%H:%M") if at.date() == today.date() else at.strftime("%Y-%m-%d %H:%M")


def telegram_health(alerts: Mapping[str, Any], now: float, tz_name: str) -> str:
    """Which half of Telegram works, e.g. ``sending ok · commands failing since 10:02 (401
    Unauthorized)``; just ``ok`` when both do. Shared by ``companyd status`` and /status.
    """
    sending = as_text(alerts.get("telegram")) or "?"
    commands = as_text(alerts.get("commands"))
    if sending == "off":
        reason = as_text(alerts.get("reason"))
        return "off" + (f" ({reason})" if reason else "")
    if not commands or (sending == "ok" and commands == "ok"):
        return sending
    send = "sending ok" if sending == "ok" else f"sending {sending}"
    reason = as_text(alerts.get("reason"))
    if sending != "ok" and reason:
        send += f" ({reason})"
    if commands == "failing":
        since = as_number(alerts.get("commands_since"))
        cmd = "commands failing"
        if since is not None:
            cmd += f" since {_clock_time(since, now, tz_name)}"
        error = as_text(alerts.get("commands_error"))
        if error:
            cmd += f" ({error})"
    else:
        cmd = f"commands {commands}"
    return f"{send} · {cmd}"


def channels_health(channels: list[Mapping[str, Any]], now: float, tz_name: str) -> str:
    """The other channels in one line, e.g. ``email ok · slack failing since 10:02 (https
    send failed: …) · ntfy unset ($NTFY_URL is not set)``.
    """
    parts = []
    for c in channels:
        name, state = as_text(c.get("name")) or "?", as_text(c.get("state")) or "?"
        part = f"{name} {state}"
        since = as_number(c.get("since"))
        if state == "failing" and since is not None:
            part += f" since {_clock_time(since, now, tz_name)}"
        error = as_text(c.get("error"))
        if state != "ok" and error:
            part += f" ({error})"
        parts.append(part)
    return " · ".join(parts)


def reload_lines(daemon: Mapping[str, Any], now: float, tz_name: str) -> list[str]:
    """Since when the running company.yaml runs, what in it waits for a restart, and the
    last rejected reload when it came after that (the file on disk is then not the one
    running). Shared by ``companyd status`` and /status.
    """
    out: list[str] = []
    loaded = as_number(daemon.get("config_loaded_at"))
    if loaded is not None:
        out.append(f"config running since {_clock_time(loaded, now, tz_name)}")
    pending = [as_text(s) for s in as_list(daemon.get("restart_required")) if as_text(s)]
    if pending:
        out.append(
            f"waiting for a restart: {', '.join(pending)} (the daemon runs the values it "
            "started with; `systemctl restart companyd` applies them)"
        )
    rejected = as_mapping(as_mapping(daemon.get("reload")).get("rejected"))
    at = as_number(rejected.get("at"))
    if at is not None and (loaded is None or at >= loaded):
        count = as_number(rejected.get("errors"))
        n = int(count) if count is not None else 0
        line = f"last reload rejected at {_clock_time(at, now, tz_name)}"
        if n:
            line += f": {n} error{'s' if n != 1 else ''}"
        first = as_text(rejected.get("first_error"))
        if first:
            line += f", first: {first}"
        out.append(line + " — the previous file keeps running; `companyd validate` lists all")
    return out


def render_status(status: Mapping[str, Any], *, now: float | None = None) -> str:
    """``companyd status`` for a human. Robust to missing keys and wrong types: what is
    absent is left out.
    """
    now = as_number(status.get("now")) or (time.time() if now is None else now)
    daemon = as_mapping(status.get("daemon"))
    company = as_mapping(status.get("company"))
    tz = as_text(company.get("timezone")) or "UTC"
    out: list[str] = []

    head = [f"companyd {as_text(daemon.get('version'))}".rstrip()]
    if as_text(company.get("name")):
        head.append(as_text(company.get("name")))
    head.append(as_text(daemon.get("state")) or "running")
    pid = as_number(daemon.get("pid"))
    if pid is not None:
        head.append(f"pid {int(pid)}")
    uptime = as_number(daemon.get("uptime_s"))
    if uptime is not None:
        head.append(f"up {format_duration(uptime)}")
    if daemon.get("offline") is True:
        head.append("OFFLINE model")
    out.append(" · ".join(head))
    detail = []
    if as_text(daemon.get("config")):
        detail.append(f"config {daemon['config']}")
    if as_text(daemon.get("state_dir")):
        detail.append(f"state {daemon['state_dir']}")
    storage = as_text(daemon.get("storage"))
    if storage and storage != "sqlite":
        detail.append(f"stores on {storage}")
    leader = as_mapping(daemon.get("leader"))
    lpid, epoch = as_number(leader.get("pid")), as_number(leader.get("epoch"))
    if as_text(daemon.get("role")) == "standby":
        detail.append(
            f"standby: {as_text(leader.get('node'))} ({as_text(leader.get('host'))}, pid "
            f"{int(lpid or 0)}) leads, epoch {int(epoch or 0)}"
            if leader
            else "standby: nobody leads right now (a takeover is under way)"
        )
    elif as_text(daemon.get("role")) == "leader" and leader:
        detail.append(f"leader (epoch {int(epoch or 0)})")
    lag = as_mapping(daemon.get("loop_lag"))
    lag_now, lag_max = as_number(lag.get("current_ms")), as_number(lag.get("max_ms"))
    if lag_now is not None:
        detail.append(
            f"loop lag {lag_now:.0f} ms"
            + (f" (max {lag_max:.0f} ms)" if lag_max is not None else "")
        )
    if detail:
        out.append(" · ".join(detail))
    out.extend(reload_lines(daemon, now, tz))

    tree = as_mapping(status.get("tree"))
    if tree:
        out.append("")
        out.extend(_render_tree(tree))

    runs = [r for r in as_list(status.get("runs_in_flight")) if isinstance(r, Mapping)]
    if isinstance(status.get("runs_in_flight"), list):
        out.append("")
        out.append(f"Runs in flight ({len(runs)})")
        for run in runs:
            out.append("  " + _render_run(run, now))
        if not runs:
            out.append("  none")

    spend = as_mapping(status.get("spend"))
    if spend:
        out.append("")
        out.extend(_render_spend(spend))

    routines = [r for r in as_list(status.get("routines")) if isinstance(r, Mapping)]
    if isinstance(status.get("routines"), list):
        out.append("")
        out.append("Next routines")
        routines.sort(key=lambda r: as_number(r.get("next_fire")) or math.inf)
        for r in routines[:10]:
            out.append("  " + _render_routine(r, now, tz))
        if len(routines) > 10:
            out.append(f"  … and {len(routines) - 10} more (`companyd jobs`)")
        if not routines:
            out.append("  none")

    alerts = as_mapping(status.get("alerts"))
    if alerts:
        line = f"Alerts: telegram {telegram_health(alerts, now, tz)}"
        queued = as_number(alerts.get("queued"))
        if queued:
            line += f", {int(queued)} queued"
        out.append("")
        out.append(line)
        channels = [c for c in as_list(alerts.get("channels")) if isinstance(c, Mapping)]
        if channels:
            out.append("Channels: " + channels_health(channels, now, tz))
    return "\n".join(out) + "\n"


def _tree_rows(
    node: Mapping[str, Any], prefix: str, last: bool, root: bool
) -> list[tuple[str, Mapping[str, Any]]]:
    name = as_text(node.get("id")) or as_text(node.get("path")).rsplit("/", 1)[-1] or "?"
    label = name if root else prefix + ("└─ " if last else "├─ ") + name
    rows = [(label, node)]
    children = [c for c in as_list(node.get("children")) if isinstance(c, Mapping)]
    child_prefix = "" if root else prefix + ("   " if last else "│  ")
    for i, child in enumerate(children):
        rows.extend(_tree_rows(child, child_prefix, i == len(children) - 1, False))
    return rows


def _state_text(node: Mapping[str, Any]) -> str:
    """A node's state as the tree shows it: ``paused (operator)``, ``paused until 14:35
    (rate limit)`` (a quota wall), ``running``.
    """
    state = as_text(node.get("state")) or "?"
    reason = as_text(node.get("pause_reason"))
    until = as_text(node.get("paused_until"))
    if until and "paused" in state:
        state += f" until {until}"
    if reason and "paused" in state:
        state += f" ({reason})"
    return state


def _render_tree(tree: Mapping[str, Any]) -> list[str]:
    rows = _tree_rows(tree, "", True, True)
    width = min(48, max(24, *(len(label) for label, _ in rows))) + 2
    states = [_state_text(node) for _, node in rows]
    # wide enough for "paused until 14:35 (rate limit)", capped so a long state stays a line
    col = min(36, max(22, *(len(s) + 2 for s in states)))
    lines = [f"{'Supervision tree':<{width}}{'state':<{col}}{'restarts':>8}  uptime"]
    for (label, node), state in zip(rows, states, strict=True):
        restarts = as_number(node.get("restarts"))
        uptime = as_number(node.get("uptime_s"))
        line = (
            f"{label:<{width}}{state:<{col}}"
            f"{(str(int(restarts)) if restarts is not None else '-'):>8}  {format_duration(uptime)}"
        )
        last_exit = as_text(node.get("last_exit"))
        if node.get("serving") is False and as_text(node.get("reason")):
            line += f"  why: {node['reason']}"
        elif last_exit and state not in ("running",):
            line += f"  last exit: {last_exit}"
        lines.append(line.rstrip())
    return lines


def _render_run(run: Mapping[str, Any], now: float) -> str:
    parts = [as_text(run.get("agent")) or "?", as_text(run.get("run_id")) or "?"]
    if as_text(run.get("routine")):
        parts.append(f"routine {run['routine']}")
    elif as_text(run.get("source")):
        parts.append(as_text(run.get("source")))
    elapsed = as_number(run.get("elapsed_s"))
    started = as_number(run.get("started_at"))
    if elapsed is None and started is not None:
        elapsed = now - started
    parts.append(format_duration(elapsed))
    cost = as_number(run.get("cost_usd"))
    if cost is not None:
        parts.append(format_usd(cost, usd_places([cost])))
    return "  ".join(parts)


def _render_spend(spend: Mapping[str, Any]) -> list[str]:
    """The spend table of status: one precision for all its amounts (enough for every
    amount that is not zero to show so), and simulated spend (the offline model's) said.
    """
    periods = [
        (label, as_mapping(spend.get(key)))
        for key, label in (("today", "today"), ("month", "this month"))
    ]
    periods = [(label, p) for label, p in periods if p]
    agents = [a for a in as_list(spend.get("agents")) if isinstance(a, Mapping)]
    agents.sort(
        key=lambda a: (
            -(as_number(a.get("today_usd")) or 0.0),
            -(as_number(a.get("month_usd")) or 0.0),
        )
    )
    # an agent that spent this month but not today is shown too (with a monthly budget only,
    # its month is what counts)
    shown = [
        a
        for a in agents
        if (as_number(a.get("today_usd")) or 0) > 0
        or (as_number(a.get("month_usd")) or 0) > 0
        or a.get("paused")
    ][:8]
    places = usd_places(
        [
            as_number(p.get(k))
            for _, p in periods
            for k in ("used_usd", "reserved_usd", "limit_usd", "simulated_usd")
        ]
        + [
            as_number(a.get(k))
            for a in shown
            for k in ("today_usd", "daily_limit_usd", "month_usd", "monthly_limit_usd")
        ]
    )
    w = 9 + places
    lines = [f"{'Spend':<14}{'used':>{w}}{'reserved':>{w}}{'budget':>{w}}{'used %':>9}"]
    for label, period in periods:
        used = as_number(period.get("used_usd"))
        reserved = as_number(period.get("reserved_usd"))
        limit = as_number(period.get("limit_usd"))
        pct = f"{used / limit:.0%}" if used is not None and limit else "-"
        line = (
            f"  {label:<12}{format_usd(used, places):>{w}}"
            f"{(format_usd(reserved, places) if reserved else ''):>{w}}"
            f"{(format_usd(limit, places) if limit is not None else 'none'):>{w}}{pct:>9}"
        )
        simulated = as_number(period.get("simulated_usd")) or 0.0
        if simulated and used is not None and abs(simulated - used) < 1e-9:
            line += "  simulated"
        elif simulated:
            line += f"  ({format_usd(simulated, places)} simulated)"
        lines.append(line)
    if any(as_number(p.get("simulated_usd")) for _, p in periods):
        lines.append("  simulated: the offline model's calls, priced as Claude's — no money spent")
    if shown:
        lines.append("  by agent (today · this month):")
        for a in shown:
            used = as_number(a.get("today_usd"))
            limit = as_number(a.get("daily_limit_usd"))
            text = f"    {as_text(a.get('agent')) or '?':<16}{format_usd(used, places):>{w - 1}}"
            if limit is not None:
                text += f" of {format_usd(limit, places)}"
            month, monthly = as_number(a.get("month_usd")), as_number(a.get("monthly_limit_usd"))
            text += f" · {format_usd(month, places)}"
            if monthly is not None:
                text += f" of {format_usd(monthly, places)}"
            if a.get("paused"):
                text += "  (paused)"
            lines.append(text)
    return lines


def _render_routine(r: Mapping[str, Any], now: float, tz: str) -> str:
    nxt = as_number(r.get("next_fire"))
    when = (
        f"in {format_duration(nxt - now)}"
        if nxt is not None and nxt >= now
        else ("due now" if nxt is not None else "not scheduled")
    )
    text = f"{when:<12}{format_when(nxt, tz):<24}{as_text(r.get('routine')) or '?'}"
    if as_text(r.get("agent")):
        text += f" → {r['agent']}"
    if r.get("enabled") is False:
        text += "  (disabled)"
    last = as_text(r.get("last_outcome"))
    if last:
        text += f"  last: {last}"
    return text


# ---------------------------------------------------------------------------------------
# install-service
