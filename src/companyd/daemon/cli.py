"""Operator commands that talk to the running daemon, and ``install-service``.

``companyd status | pause AGENT | resume AGENT | reload | raise-budget [AGENT] USD`` find
the daemon's control socket (:func:`companyd.daemon.control.find_daemon`), send one
request and print the answer for a human, or as JSON with ``--json``. The printers accept
any dict: a key the daemon did not send is left out, never a crash.

``companyd install-service`` puts ``companyd.service`` and ``companyd-alert@.service`` in
``/etc/systemd/system`` with the path of this installation, prepares ``/etc/companyd`` and
prints the next commands; ``--dry-run`` only prints.

Exit codes: 0 done; 1 the daemon refused (unknown agent, rejected config, …); 2 bad
arguments; 69 no daemon running; 70 internal error in the daemon; 75 the daemon did not
answer in time.

Other areas' commands (ask, runs, spend, jobs) reuse :func:`add_daemon_arguments` and
:func:`daemon_client` / :func:`running_daemon` to talk to the daemon when one runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, tzinfo
from importlib.resources import files
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from companyd.config import read_regular_file
from companyd.daemon.control import (
    ControlClient,
    ControlTimeout,
    RequestFailed,
    find_daemon,
)
from companyd.errors import (
    EX_SOFTWARE,
    EX_TEMPFAIL,
    EX_UNAVAILABLE,
    CompanydError,
    DaemonNotRunning,
)

__all__ = [
    "add_daemon_arguments",
    "daemon_client",
    "register",
    "render_status",
    "running_daemon",
    "status_line",
]

UNIT_NAMES = ("companyd.service", "companyd-alert@.service")
#: The install prefix written in the shipped units; install-service replaces it.
UNIT_PREFIX_PLACEHOLDER = "/opt/companyd/venv"
CONFIG_DIR = Path("/etc/companyd")
UNIT_DIR = Path("/etc/systemd/system")
CREDENTIALS = ("anthropic_api_key", "telegram_bot_token")


# ---------------------------------------------------------------------------------------
# shared by every command that talks to the daemon


def add_daemon_arguments(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """Add ``--config``, ``--state-dir``, ``--socket`` (and ``--json``) to ``parser``."""
    parser.add_argument(
        "--config",
        type=Path,
        help="company.yaml, used to find the state directory (default: $COMPANYD_CONFIG, "
        "$CONFIGURATION_DIRECTORY/company.yaml, ./company.yaml)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="the daemon's state directory (default: $STATE_DIRECTORY, company.yaml's "
        "state_dir, else state next to company.yaml)",
    )
    parser.add_argument(
        "--socket",
        type=Path,
        help="the control socket itself (default: searched; /run/companyd/companyd.sock "
        "under systemd)",
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print the raw JSON result")


def daemon_client(args: argparse.Namespace) -> ControlClient:
    """The running daemon for the parsed ``--config/--state-dir/--socket`` arguments.

    Raises:
        DaemonNotRunning: none answers (the message lists where it looked).
    """
    from companyd.cli import default_config_path

    config = getattr(args, "config", None) or default_config_path()
    return find_daemon(
        socket=getattr(args, "socket", None),
        state_dir=getattr(args, "state_dir", None),
        config=config,
    )


def running_daemon(args: argparse.Namespace) -> ControlClient | None:
    """Like :func:`daemon_client`, but None when no daemon runs (for commands that can
    also work on the files directly)."""
    try:
        return daemon_client(args)
    except DaemonNotRunning:
        return None


def _call(
    args: argparse.Namespace,
    op: str,
    printer: Callable[[dict[str, Any]], int],
    **op_args: Any,
) -> int:
    """Send one request; print the result (JSON or via ``printer``); map failures to exit
    codes with one line on stderr (and a JSON error object on stdout with ``--json``)."""
    from companyd.cli import print_json

    as_json = bool(getattr(args, "json", False))

    def fail(message: str, code: str, exit_code: int) -> int:
        print(f"companyd: {message}", file=sys.stderr)
        if as_json:
            print_json({"ok": False, "error": message, "code": code})
        return exit_code

    try:
        result = daemon_client(args).call(op, **op_args)
    except DaemonNotRunning as exc:
        return fail(str(exc), "not_running", EX_UNAVAILABLE)
    except ControlTimeout as exc:
        return fail(str(exc), "timeout", EX_TEMPFAIL)
    except RequestFailed as exc:
        exit_code = {
            "bad_request": 2,
            "internal": EX_SOFTWARE,
            "timeout": EX_TEMPFAIL,
            "busy": EX_TEMPFAIL,  # at a control-socket limit: try again shortly
        }.get(exc.code, 1)
        return fail(str(exc), exc.code, exit_code)
    except CompanydError as exc:
        return fail(str(exc), "error", 1)
    if as_json:
        print_json(result)
        return 1 if op == "reload" and result.get("applied") is False else 0
    return printer(result)


# ---------------------------------------------------------------------------------------
# registration


def register(sub: Any) -> None:
    """Add the daemon's operator commands to the top-level ``companyd`` parser."""
    p = sub.add_parser(
        "status",
        help="show the running daemon: supervision tree, runs, spend, next routines",
        description="Ask the running daemon for its status: the supervision tree with "
        "states, restart counts and uptime, runs in flight, spend today and this month "
        "against budget, and the next routines.",
    )
    add_daemon_arguments(p)
    p.set_defaults(func=_status)

    p = sub.add_parser("pause", help="stop an agent from starting new runs")
    p.add_argument("agent", help="agent slug, as in company.yaml")
    add_daemon_arguments(p)
    p.set_defaults(func=_pause)

    p = sub.add_parser("resume", help="let a paused agent run again")
    p.add_argument("agent", help="agent slug, as in company.yaml")
    add_daemon_arguments(p)
    p.set_defaults(func=_resume)

    p = sub.add_parser(
        "reload",
        help="re-read company.yaml in the running daemon and apply the difference",
        description="Like `systemctl reload companyd`, but waits for the result: what was "
        "added, removed and restarted, or why the file was rejected (the daemon then keeps "
        "the previous version).",
    )
    add_daemon_arguments(p)
    p.set_defaults(func=_reload)

    p = sub.add_parser(
        "raise-budget",
        help="raise today's budget of an agent (or the company) once",
        usage="companyd raise-budget [-h] [AGENT] USD [options]",
        description="Raise today's budget by USD dollars, once: tomorrow the limits of "
        "company.yaml apply again. Without AGENT the company's daily budget is raised.",
    )
    p.add_argument("target", nargs="+", metavar="[AGENT] USD", help="optional agent, then dollars")
    add_daemon_arguments(p)
    p.set_defaults(func=_raise_budget)

    p = sub.add_parser(
        "install-service",
        help="install the systemd units (companyd.service, companyd-alert@.service)",
        description="Write companyd.service and companyd-alert@.service to "
        "/etc/systemd/system for this installation, create /etc/companyd with empty "
        "credential files, and print the commands that start the service. Needs root; "
        "--dry-run only prints.",
    )
    p.add_argument(
        "--prefix",
        type=Path,
        default=Path(sys.prefix),
        help="the venv or prefix whose bin/companyd the units run (default: %(default)s)",
    )
    p.add_argument(
        "--root",
        type=Path,
        default=Path("/"),
        help="install below this directory instead of / (for packaging)",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="a company.yaml to copy to /etc/companyd/company.yaml (an existing one is kept)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print what would be done, change nothing"
    )
    p.set_defaults(func=_install_service)


# ---------------------------------------------------------------------------------------
# handlers


def _status(args: argparse.Namespace) -> int:
    def show(result: dict[str, Any]) -> int:
        sys.stdout.write(render_status(result))
        return 0

    return _call(args, "status", show)


def _pause(args: argparse.Namespace) -> int:
    def show(result: dict[str, Any]) -> int:
        print(
            _text(result.get("message"))
            or f"paused {args.agent}: it finishes its current run, then starts no new ones "
            f"until `companyd resume {args.agent}`"
        )
        return 0

    return _call(args, "pause", show, agent=args.agent)


def _resume(args: argparse.Namespace) -> int:
    def show(result: dict[str, Any]) -> int:
        print(_text(result.get("message")) or f"resumed {args.agent}")
        return 0

    return _call(args, "resume", show, agent=args.agent)


def _reload(args: argparse.Namespace) -> int:
    def show(result: dict[str, Any]) -> int:
        if result.get("applied") is False:
            print(
                "company.yaml was rejected; the daemon keeps running the previous version:",
                file=sys.stderr,
            )
            for err in _list(result.get("errors")):
                print(f"  {_text(err) or repr(err)}", file=sys.stderr)
            return 1
        print(_reload_summary(result))
        return 0

    return _call(args, "reload", show)


def _reload_summary(result: Mapping[str, Any]) -> str:
    message = _text(result.get("message"))
    if message:
        return message
    parts = []
    for key, word in (("added", "started"), ("removed", "stopped"), ("changed", "restarted")):
        names = [str(n) for n in _list(result.get(key))]
        if names:
            parts.append(f"{word} {', '.join(names)}")
    unchanged = result.get("unchanged")
    if isinstance(unchanged, list):
        unchanged = len(unchanged)
    if isinstance(unchanged, int) and not isinstance(unchanged, bool):
        parts.append(f"{unchanged} unchanged")
    # the scheduler's part: {"added": [...], "removed": [...], "changed": [...], ...}
    routines = _dict(result.get("routines"))
    moves = []
    for key, word in (("added", "added"), ("removed", "removed"), ("changed", "rescheduled")):
        names = [str(n) for n in _list(routines.get(key))]
        if names:
            moves.append(f"{word} {', '.join(names)}")
    if moves:
        parts.append("routines " + ", ".join(moves))
    later = [str(n) for n in _list(result.get("restart_required"))]
    if later:
        parts.append(
            f"{', '.join(later)} changed: takes effect at the next restart "
            "(`systemctl restart companyd`)"
        )
    return "reloaded company.yaml" + (": " + "; ".join(parts) if parts else ": no changes")


def _raise_budget(args: argparse.Namespace) -> int:
    target: list[str] = args.target
    if len(target) > 2:
        print(
            f"companyd raise-budget: expected [AGENT] USD, got {' '.join(target)!r}",
            file=sys.stderr,
        )
        return 2
    agent = target[0] if len(target) == 2 else None
    raw = target[-1]
    try:
        usd = float(raw.lstrip("$"))
    except ValueError:
        usd = math.nan
    if not math.isfinite(usd) or usd <= 0:
        print(
            f"companyd raise-budget: USD must be a positive number of dollars such as 5 or "
            f"2.50, got {raw!r}",
            file=sys.stderr,
        )
        return 2

    def show(result: dict[str, Any]) -> int:
        message = _text(result.get("message"))
        if message:
            print(message)
            return 0
        who = agent if agent else "the company"
        line = f"raised today's budget of {who} by {_usd(usd)}"
        limit = _number(result.get("daily_limit_usd"))
        if limit is not None:
            line += f" (today's limit is now {_usd(limit)}; back to company.yaml tomorrow)"
        print(line)
        return 0

    return _call(args, "raise_budget", show, agent=agent, usd=usd)


# ---------------------------------------------------------------------------------------
# status rendering (pure functions of the status dict; docs/daemon.md documents the shape)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _usd(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}"


def _duration(seconds: float | None) -> str:
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


def _when(ts: float | None, tz_name: str) -> str:
    if ts is None:
        return "-"
    tz: tzinfo
    try:
        tz = ZoneInfo(tz_name)
    except (ValueError, ZoneInfoNotFoundError):
        tz, tz_name = UTC, "UTC"
    try:
        return datetime.fromtimestamp(ts, tz=tz).strftime("%Y-%m-%d %H:%M ") + tz_name
    except (OverflowError, OSError, ValueError):
        return "-"


def status_line(status: Mapping[str, Any]) -> str:
    """A one-line summary of a status dict, e.g. for ``STATUS=`` or a chat message:
    ``8/8 agents up, 1 paused · 2 runs in flight · $1.23 of $10.00 today``."""
    parts: list[str] = []
    agents = _dict(status.get("agents"))
    total, up = _number(agents.get("total")), _number(agents.get("running"))
    if total is not None and up is not None:
        text = f"{int(up)}/{int(total)} agents up"
        paused = _number(agents.get("paused"))
        if paused:
            text += f", {int(paused)} paused"
        parts.append(text)
    runs = status.get("runs_in_flight")
    if isinstance(runs, list):
        parts.append(f"{len(runs)} run{'s' if len(runs) != 1 else ''} in flight")
    today = _dict(_dict(status.get("spend")).get("today"))
    used, limit = _number(today.get("used_usd")), _number(today.get("limit_usd"))
    if used is not None:
        parts.append(f"{_usd(used)} of {_usd(limit)} today" if limit else f"{_usd(used)} today")
    state = _text(_dict(status.get("daemon")).get("state"))
    if state and state != "running":
        parts.insert(0, state)
    return " · ".join(parts) if parts else "running"


def _clock_time(ts: float, now: float, tz_name: str) -> str:
    """``10:02`` on the day of ``now`` (in ``tz_name``), else ``2026-11-24 10:02``."""
    tz: tzinfo
    try:
        tz = ZoneInfo(tz_name)
    except (ValueError, ZoneInfoNotFoundError):
        tz = UTC
    try:
        at, today = datetime.fromtimestamp(ts, tz=tz), datetime.fromtimestamp(now, tz=tz)
    except (OverflowError, OSError, ValueError):
        return "?"
    return at.strftime("%H:%M") if at.date() == today.date() else at.strftime("%Y-%m-%d %H:%M")


def telegram_health(alerts: Mapping[str, Any], now: float, tz_name: str) -> str:
    """Which half of Telegram works, e.g. ``sending ok · commands failing since 10:02 (401
    Unauthorized)``; just ``ok`` when both do. Shared by ``companyd status`` and /status."""
    sending = _text(alerts.get("telegram")) or "?"
    commands = _text(alerts.get("commands"))
    if sending == "off":
        reason = _text(alerts.get("reason"))
        return "off" + (f" ({reason})" if reason else "")
    if not commands or (sending == "ok" and commands == "ok"):
        return sending
    send = "sending ok" if sending == "ok" else f"sending {sending}"
    reason = _text(alerts.get("reason"))
    if sending != "ok" and reason:
        send += f" ({reason})"
    if commands == "failing":
        since = _number(alerts.get("commands_since"))
        cmd = "commands failing"
        if since is not None:
            cmd += f" since {_clock_time(since, now, tz_name)}"
        error = _text(alerts.get("commands_error"))
        if error:
            cmd += f" ({error})"
    else:
        cmd = f"commands {commands}"
    return f"{send} · {cmd}"


def reload_lines(daemon: Mapping[str, Any], now: float, tz_name: str) -> list[str]:
    """Since when the running company.yaml runs, and the last rejected reload when it came
    after that (the file on disk is then not the one running). Shared by ``companyd
    status`` and /status."""
    out: list[str] = []
    loaded = _number(daemon.get("config_loaded_at"))
    if loaded is not None:
        out.append(f"config running since {_clock_time(loaded, now, tz_name)}")
    rejected = _dict(_dict(daemon.get("reload")).get("rejected"))
    at = _number(rejected.get("at"))
    if at is not None and (loaded is None or at >= loaded):
        count = _number(rejected.get("errors"))
        n = int(count) if count is not None else 0
        line = f"last reload rejected at {_clock_time(at, now, tz_name)}"
        if n:
            line += f": {n} error{'s' if n != 1 else ''}"
        first = _text(rejected.get("first_error"))
        if first:
            line += f", first: {first}"
        out.append(line + " — the previous file keeps running; `companyd validate` lists all")
    return out


def render_status(status: Mapping[str, Any], *, now: float | None = None) -> str:
    """``companyd status`` for a human. Robust to missing keys and wrong types: what is
    absent is left out."""
    now = _number(status.get("now")) or (time.time() if now is None else now)
    daemon = _dict(status.get("daemon"))
    company = _dict(status.get("company"))
    tz = _text(company.get("timezone")) or "UTC"
    out: list[str] = []

    head = [f"companyd {_text(daemon.get('version'))}".rstrip()]
    if _text(company.get("name")):
        head.append(_text(company.get("name")))
    head.append(_text(daemon.get("state")) or "running")
    pid = _number(daemon.get("pid"))
    if pid is not None:
        head.append(f"pid {int(pid)}")
    uptime = _number(daemon.get("uptime_s"))
    if uptime is not None:
        head.append(f"up {_duration(uptime)}")
    if daemon.get("offline") is True:
        head.append("OFFLINE model")
    out.append(" · ".join(head))
    detail = []
    if _text(daemon.get("config")):
        detail.append(f"config {daemon['config']}")
    if _text(daemon.get("state_dir")):
        detail.append(f"state {daemon['state_dir']}")
    lag = _dict(daemon.get("loop_lag"))
    lag_now, lag_max = _number(lag.get("current_ms")), _number(lag.get("max_ms"))
    if lag_now is not None:
        detail.append(
            f"loop lag {lag_now:.0f} ms"
            + (f" (max {lag_max:.0f} ms)" if lag_max is not None else "")
        )
    if detail:
        out.append(" · ".join(detail))
    out.extend(reload_lines(daemon, now, tz))

    tree = _dict(status.get("tree"))
    if tree:
        out.append("")
        out.extend(_render_tree(tree))

    runs = [r for r in _list(status.get("runs_in_flight")) if isinstance(r, Mapping)]
    if isinstance(status.get("runs_in_flight"), list):
        out.append("")
        out.append(f"Runs in flight ({len(runs)})")
        for run in runs:
            out.append("  " + _render_run(run, now))
        if not runs:
            out.append("  none")

    spend = _dict(status.get("spend"))
    if spend:
        out.append("")
        out.extend(_render_spend(spend))

    routines = [r for r in _list(status.get("routines")) if isinstance(r, Mapping)]
    if isinstance(status.get("routines"), list):
        out.append("")
        out.append("Next routines")
        routines.sort(key=lambda r: _number(r.get("next_fire")) or math.inf)
        for r in routines[:10]:
            out.append("  " + _render_routine(r, now, tz))
        if len(routines) > 10:
            out.append(f"  … and {len(routines) - 10} more (`companyd jobs`)")
        if not routines:
            out.append("  none")

    alerts = _dict(status.get("alerts"))
    if alerts:
        line = f"Alerts: telegram {telegram_health(alerts, now, tz)}"
        queued = _number(alerts.get("queued"))
        if queued:
            line += f", {int(queued)} queued"
        out.append("")
        out.append(line)
    return "\n".join(out) + "\n"


def _tree_rows(
    node: Mapping[str, Any], prefix: str, last: bool, root: bool
) -> list[tuple[str, Mapping[str, Any]]]:
    name = _text(node.get("id")) or _text(node.get("path")).rsplit("/", 1)[-1] or "?"
    label = name if root else prefix + ("└─ " if last else "├─ ") + name
    rows = [(label, node)]
    children = [c for c in _list(node.get("children")) if isinstance(c, Mapping)]
    child_prefix = "" if root else prefix + ("   " if last else "│  ")
    for i, child in enumerate(children):
        rows.extend(_tree_rows(child, child_prefix, i == len(children) - 1, False))
    return rows


def _render_tree(tree: Mapping[str, Any]) -> list[str]:
    rows = _tree_rows(tree, "", True, True)
    width = min(48, max(24, *(len(label) for label, _ in rows))) + 2
    lines = [f"{'Supervision tree':<{width}}{'state':<22}{'restarts':>8}  uptime"]
    for label, node in rows:
        state = _text(node.get("state")) or "?"
        reason = _text(node.get("pause_reason"))
        if reason and "paused" in state:
            state += f" ({reason})"
        restarts = _number(node.get("restarts"))
        uptime = _number(node.get("uptime_s"))
        line = (
            f"{label:<{width}}{state:<22}"
            f"{(str(int(restarts)) if restarts is not None else '-'):>8}  {_duration(uptime)}"
        )
        last_exit = _text(node.get("last_exit"))
        if last_exit and state not in ("running",):
            line += f"  last exit: {last_exit}"
        lines.append(line.rstrip())
    return lines


def _render_run(run: Mapping[str, Any], now: float) -> str:
    parts = [_text(run.get("agent")) or "?", _text(run.get("run_id")) or "?"]
    if _text(run.get("routine")):
        parts.append(f"routine {run['routine']}")
    elif _text(run.get("source")):
        parts.append(_text(run.get("source")))
    elapsed = _number(run.get("elapsed_s"))
    started = _number(run.get("started_at"))
    if elapsed is None and started is not None:
        elapsed = now - started
    parts.append(_duration(elapsed))
    cost = _number(run.get("cost_usd"))
    if cost is not None:
        parts.append(_usd(cost))
    return "  ".join(parts)


def _render_spend(spend: Mapping[str, Any]) -> list[str]:
    lines = [f"{'Spend':<14}{'used':>11}{'reserved':>11}{'budget':>11}{'used %':>9}"]
    for key, label in (("today", "today"), ("month", "this month")):
        period = _dict(spend.get(key))
        if not period:
            continue
        used = _number(period.get("used_usd"))
        reserved = _number(period.get("reserved_usd"))
        limit = _number(period.get("limit_usd"))
        pct = f"{used / limit:.0%}" if used is not None and limit else "-"
        lines.append(
            f"  {label:<12}{_usd(used):>11}{(_usd(reserved) if reserved else ''):>11}"
            f"{(_usd(limit) if limit is not None else 'none'):>11}{pct:>9}"
        )
    agents = [a for a in _list(spend.get("agents")) if isinstance(a, Mapping)]
    agents.sort(key=lambda a: -(_number(a.get("today_usd")) or 0.0))
    shown = [a for a in agents if (_number(a.get("today_usd")) or 0) > 0 or a.get("paused")][:8]
    if shown:
        lines.append("  by agent today:")
        for a in shown:
            used = _number(a.get("today_usd"))
            limit = _number(a.get("daily_limit_usd"))
            text = f"    {_text(a.get('agent')) or '?':<16}{_usd(used):>10}"
            if limit is not None:
                text += f" of {_usd(limit)}"
            if a.get("paused"):
                text += "  (paused)"
            lines.append(text)
    return lines


def _render_routine(r: Mapping[str, Any], now: float, tz: str) -> str:
    nxt = _number(r.get("next_fire"))
    when = (
        f"in {_duration(nxt - now)}"
        if nxt is not None and nxt >= now
        else ("due now" if nxt is not None else "not scheduled")
    )
    text = f"{when:<12}{_when(nxt, tz):<24}{_text(r.get('routine')) or '?'}"
    if _text(r.get("agent")):
        text += f" → {r['agent']}"
    if r.get("enabled") is False:
        text += "  (disabled)"
    last = _text(r.get("last_outcome"))
    if last:
        text += f"  last: {last}"
    return text


# ---------------------------------------------------------------------------------------
# install-service


def unit_text(name: str, prefix: Path) -> str:
    """The shipped unit ``name`` with ExecStart pointing into ``prefix``."""
    if name not in UNIT_NAMES:
        raise ValueError(f"unknown unit {name!r}; expected one of: {', '.join(UNIT_NAMES)}")
    text = files("companyd.daemon").joinpath("unit_files", name).read_text(encoding="utf-8")
    return text.replace(UNIT_PREFIX_PLACEHOLDER, str(prefix).rstrip("/"))


def _install_service(args: argparse.Namespace) -> int:
    prefix: Path = args.prefix.absolute()
    root: Path = args.root.absolute()
    dry: bool = args.dry_run
    if any(c.isspace() for c in str(prefix)):
        print(
            f"companyd install-service: the prefix {str(prefix)!r} contains whitespace, which "
            "ExecStart= cannot hold; install companyd in a path without spaces",
            file=sys.stderr,
        )
        return 2
    exe = prefix / "bin" / "companyd"
    if not _is_file(exe):
        message = (
            f"there is no companyd executable at {str(exe)!r}; pass --prefix with the venv or "
            "prefix where companyd is installed (e.g. --prefix /opt/companyd/venv)"
        )
        if not dry:
            print(f"companyd install-service: {message}", file=sys.stderr)
            return 2
        print(f"warning: {message}", file=sys.stderr)
    if args.config is not None and not _is_file(args.config):
        print(
            f"companyd install-service: --config {str(args.config)!r} is not a file",
            file=sys.stderr,
        )
        return 2

    def at(path: Path) -> Path:
        return root / path.relative_to("/")

    unit_dir, conf_dir = at(UNIT_DIR), at(CONFIG_DIR)
    steps: list[tuple[str, Callable[[], None]]] = []
    for name in UNIT_NAMES:
        target = unit_dir / name
        text = unit_text(name, prefix)
        steps.append((f"write {target} (mode 0644)", _writer(target, text.encode(), 0o644)))
    if not conf_dir.is_dir():
        steps.append((f"mkdir -m 0755 {conf_dir}", lambda: conf_dir.mkdir(0o755, parents=True)))
    config_target = conf_dir / "company.yaml"
    if args.config is not None:
        if config_target.exists():
            steps.append((f"keep the existing {config_target} (not overwritten)", lambda: None))
        else:
            try:
                # never a plain read: a FIFO or a device given by mistake must not hang
                data = read_regular_file(args.config, 10 * 1024 * 1024)
            except (OSError, ValueError) as exc:
                raise CompanydError(
                    f"cannot copy {str(args.config)!r}: "
                    f"{getattr(exc, 'strerror', None) or exc}; give the path to your "
                    "company.yaml (a regular file)"
                ) from None
            steps.append(
                (
                    f"copy {args.config} to {config_target} (mode 0644)",
                    _writer(config_target, data, 0o644),
                )
            )
    for cred in CREDENTIALS:
        path = conf_dir / cred
        if not path.exists():
            steps.append(
                (
                    f"create empty {path} (mode 0600; LoadCredential= needs the file to exist)",
                    _writer(path, b"", 0o600, exclusive=True),
                )
            )

    print("companyd install-service" + (" --dry-run: would" if dry else ":"))
    for text, action in steps:
        print(f"  {text}")
        if not dry:
            try:
                action()
            except PermissionError as exc:
                print(
                    f"companyd install-service: cannot write {exc.filename!r}: permission "
                    "denied; run it as root (`sudo companyd install-service`) or see "
                    "--dry-run for the steps",
                    file=sys.stderr,
                )
                return 1
            except OSError as exc:
                print(f"companyd install-service: {exc}", file=sys.stderr)
                return 1
    config_hint = config_target if root == Path("/") else CONFIG_DIR / "company.yaml"
    have_config = args.config is not None or config_target.exists()
    how = (
        f"`companyd validate {config_hint}`"
        if have_config
        else f"`companyd init {CONFIG_DIR}`, then `companyd validate {config_hint}`"
    )
    print(
        "\nnext:\n"
        f"  1. company.yaml: {'check' if have_config else 'write'} {config_hint} ({how})\n"
        f"  2. secrets (root-only files, never in company.yaml):\n"
        f"       sudo sh -c 'umask 077; printf %s \"$KEY\" > {CONFIG_DIR}/anthropic_api_key'\n"
        f"       sudo sh -c 'umask 077; printf %s \"$TOKEN\" > {CONFIG_DIR}/telegram_bot_token'\n"
        "  3. sudo systemctl daemon-reload && sudo systemctl enable --now companyd\n"
        "  4. sudo companyd status     journalctl -u companyd -f\n"
        "(docs/deploy.md explains each step)"
    )
    return 0


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a directory on the way we may not search
        return False


def _writer(path: Path, data: bytes, mode: int, *, exclusive: bool = False) -> Callable[[], None]:
    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if exclusive:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            os.close(fd)
            return
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.write(fd, data)
            os.fchmod(fd, mode)  # the umask may have narrowed it
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    return write
