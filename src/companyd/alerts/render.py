"""How alerts read on a phone: event kinds → title, detail lines and buttons (private).

Part of :mod:`companyd.alerts.service`. Everything here is pure (no I/O, no clock reads) and total:
any ``data`` mapping, however incomplete or mistyped, renders to *some* readable text —
a publisher that forgets a field must not cost the operator the alert. The fields each kind
is expected to carry are listed in docs/events.md.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from companyd.status_text import reload_lines, status_line, telegram_health

__all__ = [
    "MAX_TEXT",
    "RAISE_STEP_USD",
    "Button",
    "KindSpec",
    "compose",
    "format_jobs",
    "format_result",
    "format_status",
    "is_abnormal_exit",
    "kind_spec",
    "render",
    "split_text",
]

#: Telegram's limit on a message text, in characters.
MAX_TEXT = 4096

#: What the "raise today's budget" button adds, in USD. Fixed on purpose: one tap must never
#: authorise an open-ended amount; the operator taps again (or uses the CLI) for more.
RAISE_STEP_USD = 5.0

ICONS = {"critical": "🔴", "warning": "🟠", "info": "🔵", "debug": "⚪", "digest": "🌙"}

Data = Mapping[str, Any]


@dataclass(frozen=True)
class Button:
    """An inline button offered on an alert.

    Attributes:
        label: what the button says.
        action: ``pause`` | ``resume`` | ``raise`` | ``approve`` | ``reject`` | ``retry`` |
            ``run_job``.
        arg: the agent, proposal id, task id or routine it acts on ("" = the company, for
            ``raise``).
        usd: the amount for ``raise``.
    """

    label: str
    action: str
    arg: str
    usd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "action": self.action, "arg": self.arg, "usd": self.usd}


@dataclass(frozen=True)
class Rendered:
    """The variable part of an alert: a title and detail lines."""

    title: str
    lines: tuple[str, ...] = ()


Renderer = Callable[[Data, str, Mapping[str, int]], Rendered]
ButtonMaker = Callable[[Data, Collection[str]], list[Button]]


def _no_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    return []


@dataclass(frozen=True)
class KindSpec:
    """How one event kind becomes an alert.

    Attributes:
        group: coalescing group; kinds that tell the same story (a child exited, then was
            restarted) share one so they land in one message.
        subject: ``data`` fields that tell *what* the alert is about; with the group and the
            event source they form the coalescing key.
        render: the title and lines.
        buttons: the actions offered.
    """

    group: str
    subject: tuple[str, ...]
    render: Renderer
    buttons: ButtonMaker = field(default=_no_buttons)


# ---------------------------------------------------------------------------------------
# Value helpers: every one of them accepts anything and returns a string


def _txt(value: Any, limit: int = 300) -> str:
    if value is None:
        return "?"
    if isinstance(value, str):
        s = value
    elif isinstance(value, float) and value.is_integer():
        s = str(int(value))
    elif isinstance(value, list | tuple):
        s = ", ".join(_txt(v, 80) for v in value)
    elif isinstance(value, dict):
        s = json.dumps(value, ensure_ascii=False, default=str)
    else:
        s = str(value)
    s = " ".join(s.split()) if "\n" not in s else s.strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _num(value: Any) -> float | None:
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


def _usd(value: Any) -> str:
    n = _num(value)
    if n is None:
        return "$?"
    return f"${n:,.2f}" if abs(n) < 1000 else f"${n:,.0f}"


def _pct(level: Any, used: Any = None, limit: Any = None) -> str:
    n = _num(level)
    if n is None:
        u, lim = _num(used), _num(limit)
        if u is not None and lim:
            n = u / lim
    if n is None:
        return "?%"
    if n > 1.5:  # a percentage given as 80 rather than 0.8
        n /= 100
    return f"{n * 100:.0f}%"


def _secs(value: Any) -> str:
    n = _num(value)
    if n is None:
        return "?"
    if n < 120:
        return f"{n:.0f} s"
    if n < 7200:
        return f"{n / 60:.0f} min"
    return f"{n / 3600:.1f} h"


def _has(data: Data, key: str) -> bool:
    v = data.get(key)
    return v is not None and v != "" and v != []


def _line(label: str, data: Data, key: str, fmt: Callable[[Any], str] = _txt) -> list[str]:
    return [f"{label}: {fmt(data.get(key))}"] if _has(data, key) else []


def agent_of(data: Data, agents: Collection[str] = ()) -> str | None:
    """The agent an event is about: ``data.agent``, else a supervisor ``child`` id that names
    an agent (``cfo``, ``agent:cfo``, ``agents/cfo``)."""
    agent = data.get("agent")
    if isinstance(agent, str) and agent:
        return agent
    child = data.get("child")
    if isinstance(child, str) and child:
        if child in agents:
            return child
        tail = child.replace(":", "/").rsplit("/", 1)[-1]
        if tail in agents:
            return tail
    return None


def _who(data: Data) -> str:
    return agent_of(data) or _txt(data.get("child"), 80)


def is_abnormal_exit(reason: Any) -> bool:
    """False for OTP's normal exits: ``normal``, ``shutdown``, ``shutdown:<info>`` (the
    supervisor's spelling) or ``{shutdown, <info>}`` (Erlang's)."""
    if not isinstance(reason, str):
        return reason is not None
    r = reason.strip().strip("{}").split(",")[0].split(":")[0].strip().lower()
    return r not in ("normal", "shutdown")


def _crash(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    who = _who(data)
    n = max(counts.get("restart", 0), counts.get("child_exited", 0), 1)
    restarted = counts.get("restart", 0) > 0 or data.get("action") == "restart"
    if n > 1:
        title = f"{who} is crash-looping: {n} crashes"
    elif restarted:
        title = f"{who} crashed and was restarted"
    else:
        kind = data.get("restart_type") or data.get("restart")
        title = f"{who} crashed and was not restarted" + (f" ({_txt(kind, 20)})" if kind else "")
    lines = _line("last reason" if n > 1 else "reason", data, "reason")
    if _has(data, "restarts"):
        if _has(data, "max_restarts"):
            within = data.get("max_seconds", data.get("within_seconds"))
            lines.append(
                f"restarts in the last {_secs(within)}: {_txt(data.get('restarts'))} "
                f"(the supervisor gives up above {_txt(data.get('max_restarts'))})"
            )
        else:
            lines.append(f"restart count: {_txt(data.get('restarts'))}")
    if data.get("gave_up") and _has(data, "message"):
        lines.append(_txt(data.get("message"), 400))
    lines.append(f"supervisor: {_txt(source, 120)}")
    return Rendered(title, tuple(lines))


def _crash_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    agent = agent_of(data, agents)
    return [Button(f"⏸ Pause {agent}", "pause", agent)] if agent and agent in agents else []


def _max_intensity(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    restarts = data.get("restarts")
    limit = data.get("max_restarts")
    within = data.get("max_seconds", data.get("within_seconds"))
    lines: list[str] = []
    if restarts is not None or limit is not None:
        lines.append(
            f"{_txt(restarts)} restarts in {_secs(within)} — more than its limit of {_txt(limit)}"
        )
    elif _has(data, "message"):
        lines.append(_txt(data.get("message"), 400))
    if _has(data, "child"):
        lines.append(f"last to fail: {_txt(data.get('child'))}: {_txt(data.get('reason'))}")
    elif _has(data, "reason"):
        lines.append(f"reason: {_txt(data.get('reason'))}")
    lines.append(
        "it stopped its children and exited; its parent restarts it, or companyd stops "
        "if it is the root"
    )
    return Rendered(f"supervisor {_txt(source, 120)} gave up", tuple(lines))


def _start_failed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    who = _who(data) if _has(data, "child") or _has(data, "agent") else "a supervisor"
    return Rendered(
        f"{who} failed to start",
        (
            *_line("reason", data, "reason"),
            *_line("while", data, "phase"),
            f"supervisor: {_txt(source, 120)}",
        ),
    )


def _daemon_started(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = counts.get("daemon_started", 1)
    title = "companyd started" if n <= 1 else f"companyd started {n} times — restart loop?"
    parts = []
    if _has(data, "agents"):
        parts.append(f"{_txt(data.get('agents'))} agents")
    if _has(data, "routines"):
        parts.append(f"{_txt(data.get('routines'))} routines")
    lines = [", ".join(parts)] if parts else []
    if data.get("offline") is True:
        lines.append("offline mode: no model is called")
    lines += _line("version", data, "version") + _line("config", data, "config")
    return Rendered(title, tuple(lines))


def _daemon_stopping(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered("companyd is stopping", tuple(_line("reason", data, "reason")))


def _daemon_reloaded(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines: list[str] = []
    changes = data.get("changes")
    if isinstance(changes, list):
        lines += [f"• {_txt(c, 200)}" for c in changes[:10]]
        if len(changes) > 10:
            lines.append(f"… and {len(changes) - 10} more")
    elif _has(data, "changes"):
        lines.append(_txt(changes))
    for key, label in (
        ("started", "agents started"),
        ("stopped", "agents stopped"),
        ("restarted", "agents restarted"),
    ):
        value = data.get(key)
        if isinstance(value, list):
            if value:
                lines.append(f"{label}: {_txt(', '.join(map(str, value)), 300)}")
        elif _has(data, key):
            lines.append(f"{label}: {_txt(value, 300)}")
    routines = data.get("routines")
    if isinstance(routines, Mapping):
        for key in ("added", "removed", "changed"):
            names = routines.get(key)
            if isinstance(names, list) and names:
                lines.append(f"routines {key}: {_txt(', '.join(map(str, names)), 300)}")
    elif _has(data, "routines") and routines != {}:
        lines.append(f"routines: {_txt(routines, 300)}")
    if not lines and _has(data, "unchanged"):
        lines.append("no agent changed")
    return Rendered("company.yaml reloaded", tuple(lines))


def _config_rejected(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    errors = data.get("errors")
    lines: list[str] = []
    if isinstance(errors, list):
        count = data.get("count")
        total = count if isinstance(count, int) else len(errors)
        lines += [f"• {_txt(e, 300)}" for e in errors[:5]]
        if total > min(5, len(errors)):
            lines.append(f"… and {total - min(5, len(errors))} more — run `companyd validate`")
    elif _has(data, "errors"):
        lines.append(_txt(errors, 600))
    lines += _line("file", data, "file")
    return Rendered("company.yaml change rejected — the running config stays", tuple(lines))


def _budget_who(data: Data) -> str:
    agent = data.get("agent")
    if data.get("scope") == "company" or not agent:
        return "the company"
    return _txt(agent, 80)


def _period(data: Data) -> str:
    p = data.get("period")
    return {"day": "daily", "today": "daily", "month": "monthly"}.get(str(p), _txt(p, 40))


def _budget_threshold(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    used, limit = data.get("used_usd"), data.get("limit_usd")
    pct = _pct(data.get("level"), used, limit)
    title = f"{_budget_who(data)} has used {pct} of its {_period(data)} budget"
    lines = [f"{_usd(used)} of {_usd(limit)}"] if _has(data, "used_usd") else []
    return Rendered(title, tuple(lines))


def _raise_button(data: Data, agents: Collection[str]) -> list[Button]:
    agent = data.get("agent")
    if data.get("scope") == "company" or not agent:
        return [Button(f"➕ ${RAISE_STEP_USD:.0f} today (company)", "raise", "", RAISE_STEP_USD)]
    if agent in agents:
        return [Button(f"➕ ${RAISE_STEP_USD:.0f} today", "raise", str(agent), RAISE_STEP_USD)]
    return []


def _budget_threshold_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    agent = data.get("agent")
    out = []
    if data.get("scope") != "company" and agent in agents:
        out.append(Button(f"⏸ Pause {agent}", "pause", str(agent)))
    return out + _raise_button(data, agents)


def _paused_list(data: Data) -> list[str]:
    paused = data.get("paused")
    if isinstance(paused, list) and paused:
        return [f"paused: {_txt(paused, 200)}"]
    if paused is True:
        return [f"paused: {_txt(data.get('agent'))}"]
    return []


def _budget_exhausted(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"{_budget_who(data)} reached its {_period(data)} budget"
    lines = []
    if _has(data, "used_usd") or _has(data, "limit_usd"):
        lines.append(f"{_usd(data.get('used_usd'))} of {_usd(data.get('limit_usd'))}")
    # The spend book's event names the agent whose call was refused (``asked_by``); the
    # runtime pauses exactly that agent (roles.agent), so that is who the operator resumes.
    lines += _paused_list(data) or _line("paused", data, "asked_by")
    lines += _line("resets", data, "resets_at", _when)
    lines.append("new runs wait until the budget resets or is raised")
    return Rendered(title, tuple(lines))


def _budget_exhausted_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    out = _raise_button(data, agents)
    agent = data.get("agent")
    if data.get("scope") == "company" or not agent:
        agent = data.get("asked_by")
    if isinstance(agent, str) and agent in agents:
        out.append(Button(f"▶ Resume {agent}", "resume", agent))
    return out


def _api_spend_limit(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines = [*_line("API says", data, "message"), *_line("agent", data, "agent")]
    lines += _paused_list(data)
    if isinstance(data.get("action"), str) and data["action"]:
        lines.append(_txt(data["action"]))  # the spend book's: "every agent is paused; …"
    else:
        lines.append("raise the limit in the Anthropic console, then /resume the agents")
    return Rendered("Anthropic API spend limit reached — calls refused", tuple(lines))


def _api_key_refused(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines = [*_line("API says", data, "message"), *_paused_list(data)]
    lines.append(
        "fix the key (anthropic.api_key_env or the anthropic_api_key credential), restart "
        "companyd, then /resume the agents"
    )
    return Rendered("Anthropic API key refused — every agent is paused", tuple(lines))


def _spend_unanswered(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = _num(data.get("calls")) or counts.get("spend_unanswered", 1)
    total = _num(data.get("total_worst_case_usd"))
    # small sums matter here (a call's worst case is often cents): show four decimals
    amount = f"${total:.4f}" if total is not None and total < 1 else _usd(total)
    title = f"{n:.0f} call{'s' if n != 1 else ''} timed out; up to {amount} may have been billed"
    lines = [
        "today, company-wide; counted against the budgets at their worst case",
        *_line("last", data, "agent"),
        *_line("reason", data, "reason"),
    ]
    return Rendered(title, tuple(lines))


def _spend_runaway(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    factor = _num(data.get("factor"))
    title = f"{_who(data)} is spending fast" + (f": {factor:.0f}× its usual rate" if factor else "")
    lines = []
    if _has(data, "rate_usd_per_hour"):
        lines.append(
            f"{_usd(data.get('rate_usd_per_hour'))}/h (usual "
            f"{_usd(data.get('usual_usd_per_hour'))}/h)"
        )
    return Rendered(title, tuple(lines))


def _pause_agent_button(data: Data, agents: Collection[str]) -> list[Button]:
    agent = agent_of(data, agents)
    return [Button(f"⏸ Pause {agent}", "pause", agent)] if agent and agent in agents else []


def _routine_failed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = counts.get("routine_failed", 1)
    title = f"routine {_txt(data.get('routine'), 80)} failed" + (f" {n} times" if n > 1 else "")
    lines = [
        *_line("agent", data, "agent"),
        *_outcome_line(data),
        *_line("reason", data, "reason"),
        *_scheduled_line(data),
        *_line("run", data, "run_id"),
    ]
    return Rendered(title, tuple(lines))


def _outcome_line(data: Data) -> list[str]:
    """The scheduler's outcome when it says more than the title (``budget_exhausted``, …)."""
    outcome = data.get("outcome")
    if not _has(data, "outcome") or outcome in ("failed", "missed", "skipped"):
        return []
    return [f"outcome: {_txt(outcome, 40)}"]


def _scheduled_line(data: Data) -> list[str]:
    """The fire time: ``scheduled`` (ISO, as the scheduler sends it) or ``scheduled_for``."""
    key = "scheduled" if _has(data, "scheduled") else "scheduled_for"
    return _line("scheduled for", data, key, _when)


def _routine_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    routine = data.get("routine")
    return [Button("🔁 Run again now", "run_job", routine)] if isinstance(routine, str) else []


def _when(value: Any) -> str:
    n = _num(value)
    if n is None and isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            n = parsed.timestamp()
    if n is not None and n > 1e9:
        try:
            return datetime.fromtimestamp(n, ZoneInfo("UTC")).strftime("%Y-%m-%d %H:%M UTC")
        except (ValueError, OverflowError, OSError):
            pass  # past year 9999: not a time anything here wrote; show it as it is
    return _txt(value, 60)


def _routine_missed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = _num(data.get("count"))
    many = n is not None and n > 1 and n.is_integer()
    runs = f"{n:.0f} runs" if many else "a run"
    title = f"routine {_txt(data.get('routine'), 80)} missed {runs}"
    # The scheduler's summary at start names the first missed fire time and the latest one.
    when = (
        _line("first", data, "first", _when) + _line("last", data, "scheduled", _when)
        if many
        else _scheduled_line(data)
    )
    lines = [*when, *_line("reason", data, "reason"), *_line("agent", data, "agent")]
    return Rendered(title, tuple(lines))


def _routine_skipped(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"routine {_txt(data.get('routine'), 80)} skipped a run"
    lines = _line("reason", data, "reason") + _scheduled_line(data) + _line("agent", data, "agent")
    return Rendered(title, tuple(lines))


def _task_quarantined(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"task {_txt(data.get('task_id'), 80)} quarantined"
    if _has(data, "crashes"):
        title += f" after {_txt(data.get('crashes'))} crashes"
    errors = data.get("errors")
    last_error = errors[-1] if isinstance(errors, list) and errors else None
    lines = [
        *_line("agent", data, "agent"),
        *_line("routine", data, "routine"),
        *_line("reason", data, "reason"),
        *([f"last error: {_txt(last_error, 300)}"] if last_error is not None else []),
        *_line("attempts", data, "attempts"),
        *_line("task", data, "prompt", lambda v: _txt(v, 200)),
    ]
    if _has(data, "task_id"):
        lines.append(f"retry with /retry {_txt(data.get('task_id'), 80)}")
    return Rendered(title, tuple(lines))


def _task_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    task = data.get("task_id")
    return [Button("🔁 Retry task", "retry", task)] if isinstance(task, str) and task else []


def _memory_repaired(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines: list[str] = []
    if _has(data, "summary"):
        lines.append(_txt(data.get("summary"), 300))
    counts_line = [
        f"{k}: {_txt(data.get(k))}"
        for k in ("kept", "dropped", "fixed", "quarantined_lines", "merged_entities")
        if _has(data, k) and data.get(k) not in (0, None)
    ]
    if counts_line:
        lines.append(", ".join(counts_line))
    lines += _line("file", data, "path") + _line("backup", data, "backup")
    lines += _line("unreadable lines kept in", data, "corrupt_file")
    lines += _line("reason", data, "reason")
    return Rendered("memory file repaired", tuple(lines))


def _commands_failing(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines = [*_line("since", data, "since", _when), *_line("error", data, "error")]
    lines.append(
        "alerts still go out; companyd keeps polling with backoff. Check the bot token "
        "and alerts.telegram.api_url; `companyd status` shows the state"
    )
    return Rendered("Telegram commands are not reaching companyd", tuple(lines))


def _commands_recovered(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines = [*_line("failing since", data, "since", _when), *_line("last error", data, "error")]
    return Rendered("Telegram commands work again", tuple(lines))


def _mcp_server_failed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = (
        f"MCP server {_txt(data.get('server'), 80)!r} of {_who(data)} failed; running "
        "without its tools"
    )
    lines = _line("reason", data, "reason")
    retry = data.get("retry_in_s")
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        lines.append(f"retrying in {retry:g} s, then with growing waits (up to 5 min)")
    return Rendered(title, tuple(lines))


def _mcp_server_recovered(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"MCP server {_txt(data.get('server'), 80)!r} of {_who(data)} is up again"
    tools = data.get("tools")
    lines = [f"tools: {_txt(', '.join(map(str, tools)), 300)}"] if isinstance(tools, list) else []
    return Rendered(title, tuple(lines))


def _circuit_breaker(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"circuit breaker stopped a run of {_who(data)}"
    lines = []
    # Which limit: ``breaker`` (documented) or ``limit`` as a name (the agent runtime's
    # spelling, with ``reason`` telling the numbers).
    name = data.get("breaker")
    if name is None and isinstance(data.get("limit"), str):
        name = data.get("limit")
    if name is not None:
        what = _txt(name, 60)
        if _has(data, "value"):
            what += f": {_txt(data.get('value'))} (limit {_txt(data.get('limit'))})"
        lines.append(what)
    lines += _line("reason", data, "reason") + _line("routine", data, "routine")
    lines += _line("run", data, "run_id")
    return Rendered(title, tuple(lines))


def _proposal_created(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    pid = _txt(data.get("proposal_id"), 60)
    head = f"proposal {pid} awaits approval"
    if _has(data, "title"):
        head += f": {_txt(data.get('title'), 120)}"
    lines = [
        *_line("for", data, "agent"),
        *_line("from", data, "proposer"),
        *_line("why", data, "reason", _summary),
        *_line("summary", data, "summary", _summary),
    ]
    diff = data.get("diff")
    if isinstance(diff, str) and diff.strip():
        shown = diff.strip().splitlines()
        lines += shown[:25] + ([f"… {len(shown) - 25} more diff lines"] if len(shown) > 25 else [])
    if _has(data, "proposal_id"):
        lines.append(f"/approve {pid} or /reject {pid}")
    return Rendered(head, tuple(lines))


def _summary(value: Any) -> str:
    return _txt(value, 800)


def _proposal_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    pid = data.get("proposal_id")
    if not isinstance(pid, str | int) or isinstance(pid, bool) or pid == "":
        return []
    return [Button("✅ Approve", "approve", str(pid)), Button("✖ Reject", "reject", str(pid))]


def _run_failed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = counts.get("run_failed", 1)
    title = f"a run of {_who(data)} failed" + (f" ({n} runs)" if n > 1 else "")
    return Rendered(title, tuple(_line("reason", data, "reason") + _line("run", data, "run_id")))


def _agent_paused(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered(
        f"{_who(data)} paused", tuple(_line("reason", data, "reason") + _line("by", data, "by"))
    )


def _agent_resumed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered(f"{_who(data)} resumed", tuple(_line("by", data, "by")))


def _resume_button(data: Data, agents: Collection[str]) -> list[Button]:
    agent = agent_of(data, agents)
    return [Button(f"▶ Resume {agent}", "resume", agent)] if agent and agent in agents else []


def _model_fallback(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"{_who(data)} fell back to {_txt(data.get('to_model'), 80)}"
    return Rendered(
        title, tuple(_line("from", data, "from_model") + _line("reason", data, "reason"))
    )


def _unknown_price(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered(
        f"no price known for model {_txt(data.get('model'), 80)}",
        ("it is charged at the most expensive known rate; add it under 'pricing'",),
    )


def _generic(kind: str) -> Renderer:
    def render(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
        title = kind.replace("_", " ")
        if source:
            title += f" ({_txt(source, 80)})"
        lines = [f"{k}: {_txt(v, 200)}" for k, v in list(data.items())[:8]]
        return Rendered(title, tuple(lines))

    return render


_CRASH = KindSpec("crash", ("child",), _crash, _crash_buttons)

KINDS: Mapping[str, KindSpec] = {
    "restart": _CRASH,
    "child_exited": _CRASH,
    "max_intensity": KindSpec("max_intensity", (), _max_intensity, _crash_buttons),
    "child_start_failed": KindSpec("child_start_failed", ("child",), _start_failed),
    "daemon_started": KindSpec("daemon_started", (), _daemon_started),
    "daemon_stopping": KindSpec("daemon_stopping", (), _daemon_stopping),
    "daemon_reloaded": KindSpec("daemon_reloaded", (), _daemon_reloaded),
    "config_rejected": KindSpec("config_rejected", (), _config_rejected),
    "budget_threshold": KindSpec(
        "budget_threshold",
        ("scope", "agent", "period", "level"),
        _budget_threshold,
        _budget_threshold_buttons,
    ),
    "budget_exhausted": KindSpec(
        "budget_exhausted",
        ("scope", "agent", "period"),
        _budget_exhausted,
        _budget_exhausted_buttons,
    ),
    "api_spend_limit": KindSpec("api_spend_limit", (), _api_spend_limit),
    "api_key_refused": KindSpec("api_key_refused", (), _api_key_refused),
    "spend_runaway": KindSpec("spend_runaway", ("agent",), _spend_runaway, _pause_agent_button),
    "spend_unanswered": KindSpec("spend_unanswered", (), _spend_unanswered),
    "routine_failed": KindSpec("routine_failed", ("routine",), _routine_failed, _routine_buttons),
    "routine_missed": KindSpec("routine_missed", ("routine",), _routine_missed, _routine_buttons),
    "routine_skipped": KindSpec("routine_skipped", ("routine",), _routine_skipped),
    "task_quarantined": KindSpec(
        "task_quarantined", ("task_id",), _task_quarantined, _task_buttons
    ),
    "memory_repaired": KindSpec("memory_repaired", (), _memory_repaired),
    "telegram_commands_failing": KindSpec("telegram_commands_failing", (), _commands_failing),
    "telegram_commands_recovered": KindSpec("telegram_commands_recovered", (), _commands_recovered),
    "mcp_server_failed": KindSpec("mcp_server_failed", ("agent", "server"), _mcp_server_failed),
    "mcp_server_recovered": KindSpec(
        "mcp_server_recovered", ("agent", "server"), _mcp_server_recovered
    ),
    "circuit_breaker": KindSpec(
        "circuit_breaker", ("agent", "breaker"), _circuit_breaker, _pause_agent_button
    ),
    "proposal_created": KindSpec(
        "proposal_created", ("proposal_id",), _proposal_created, _proposal_buttons
    ),
    "run_failed": KindSpec("run_failed", ("agent",), _run_failed, _pause_agent_button),
    "agent_paused": KindSpec("agent_paused", ("agent",), _agent_paused, _resume_button),
    "agent_resumed": KindSpec("agent_resumed", ("agent",), _agent_resumed),
    "model_fallback": KindSpec("model_fallback", ("agent", "to_model"), _model_fallback),
    "unknown_model_price": KindSpec("unknown_model_price", ("model",), _unknown_price),
}


def kind_spec(kind: str) -> KindSpec:
    """The spec for ``kind``; unknown kinds get a generic one keyed by the ``agent``,
    ``child`` and ``routine`` fields."""
    spec = KINDS.get(kind)
    if spec is not None:
        return spec
    return KindSpec(kind, ("agent", "child", "routine"), _generic(kind))


def render(
    kind: str,
    data: Data,
    source: str,
    counts: Mapping[str, int],
    agents: Collection[str],
) -> tuple[Rendered, list[Button]]:
    """Title, lines and buttons for an alert; never raises (falls back to a generic text)."""
    spec = kind_spec(kind)
    try:
        rendered = spec.render(data, source, counts)
    except Exception:  # a renderer bug must not cost the alert
        rendered = _generic(kind)(data, source, counts)
    try:
        buttons = spec.buttons(data, agents)
    except Exception:
        buttons = []
    return rendered, buttons


def compose(
    *,
    severity: str,
    rendered: Rendered,
    count: int,
    first_ts: float,
    last_ts: float,
    company: str,
    tz: ZoneInfo,
    footer: Sequence[str] = (),
) -> str:
    """The full message text: icon and title, details, the coalescing counter, where and
    when, and what the operator did about it. Cut to Telegram's limit."""
    out = [f"{ICONS.get(severity, '•')} {rendered.title}", *rendered.lines]
    first = datetime.fromtimestamp(first_ts, tz)
    if count > 1:
        last = datetime.fromtimestamp(last_ts, tz)
        out.append(
            f"×{count} in {_secs(max(0.0, last_ts - first_ts))} "
            f"(first {first:%H:%M}, last {last:%H:%M})"
        )
    out.append(f"{company} · {first:%H:%M %Z, %d %b}")
    out += list(footer)
    return clip("\n".join(out))


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, marking the cut."""
    return text if len(text) <= limit else text[: limit - 2] + "\n…"


def split_text(text: str, limit: int = MAX_TEXT, max_parts: int = 4) -> list[str]:
    """``text`` as up to ``max_parts`` messages of at most ``limit`` characters each, cut at
    a line end where one is near (else at a space, else anywhere); what does not fit in
    ``max_parts`` is clipped from the last one."""
    parts: list[str] = []
    rest = text
    while len(rest) > limit and len(parts) < max_parts - 1:
        cut = rest.rfind("\n", limit // 2, limit + 1)
        if cut < 0:
            cut = rest.rfind(" ", limit // 2, limit + 1)
        if cut < 0:
            parts.append(rest[:limit])
            rest = rest[limit:]
        else:
            parts.append(rest[:cut])
            rest = rest[cut + 1 :]
    parts.append(clip(rest, limit))
    return [p for p in parts if p.strip()]


# ---------------------------------------------------------------------------------------
# Admin results for a phone screen


def format_result(title: str, result: Any, max_lines: int = 80) -> str:
    """A compact, indented text of an :class:`~companyd.admin.Admin` result dict.

    Keys ending in ``_usd`` show as dollars, ``*_ts``/``*_at`` epoch numbers as UTC times,
    ``*_pct``/``*_rate``/``level`` fractions as percentages; nesting is shown with two
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
    result without a ``routines`` list."""
    routines = result.get("routines") if isinstance(result, Mapping) else None
    if not isinstance(routines, list):
        return format_result("⏰ routines", result)
    lines = ["⏰ routines"]
    for r in routines:
        if not isinstance(r, Mapping):
            continue
        name = _txt(r.get("routine") or r.get("name"), 60)
        head = f"• {name}"
        if _has(r, "agent"):
            head += f" → {_txt(r.get('agent'), 40)}"
        if _has(r, "schedule"):
            head += f" · {_txt(r.get('schedule'), 60)}"
        lines.append(head)
        if r.get("enabled") is False:
            lines.append("  disabled")
            continue
        nxt = r.get("next_fire") or r.get("next_fire_ts")
        detail = [f"next {_when(nxt)}" if nxt else "not scheduled"]
        if _has(r, "catch_up_pending"):
            detail.append("catch-up due at start")
        last = r.get("last")
        if isinstance(last, Mapping) and _has(last, "outcome"):
            detail.append(f"last {_txt(last.get('outcome'), 30)}")
        elif "last" in r:
            detail.append("never fired")
        rate = r.get("success_7d")
        if isinstance(rate, Mapping) and _num(rate.get("due")):
            detail.append(
                f"7d {_pct(rate.get('rate'), rate.get('ok'), rate.get('due'))} "
                f"({_txt(rate.get('ok'))}/{_txt(rate.get('due'))})"
            )
        lines.append("  " + " · ".join(detail))
        if isinstance(last, Mapping) and last.get("outcome") not in (None, "ok", "idle"):
            lines += ["  " + x for x in _line("why", last, "reason")]
    if len(lines) == 1:
        lines.append("no routines")
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
    head = f"📊 {_txt(company.get('name') or 'companyd', 80)} — {_txt(daemon.get('state'), 20)}"
    if _num(daemon.get("uptime_s")) is not None:
        head += f", up {_secs(daemon.get('uptime_s'))}"
    if daemon.get("offline") is True:
        head += " · OFFLINE model"
    lines = [head, status_line(status)]
    now = _num(status.get("now")) or time.time()
    tz = _txt(m(status.get("company")).get("timezone") or "UTC", 60)
    lines += [_txt(x, 400) for x in reload_lines(daemon, now, tz)]
    alerts = m(status.get("alerts"))
    if alerts:
        health = telegram_health(alerts, now, tz)
        if health != "ok":
            lines.append(f"telegram: {_txt(health, 300)}")

    trouble: list[str] = []

    def walk(node: Mapping[str, Any]) -> None:
        state, restarts = node.get("state"), _num(node.get("restarts")) or 0
        if state != "running" or restarts:
            text = f"  {_txt(node.get('id'), 40)}: {_txt(state, 20)}"
            if node.get("pause_reason"):
                text += f" ({_txt(node.get('pause_reason'), 20)})"
            if restarts:
                text += f", restarted {restarts:.0f}×"
            if node.get("last_exit") and state != "running":
                text += f", last exit: {_txt(node.get('last_exit'), 120)}"
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
            f"  ▶ {_txt(r.get('agent'), 40)} {_txt(r.get('run_id'), 40)} "
            f"{_txt(r.get('routine') or r.get('source'), 60)} {_secs(r.get('elapsed_s'))} "
            f"{_usd(r.get('cost_usd'))}"
        )
    month = m(m(status.get("spend")).get("month"))
    if _num(month.get("used_usd")) is not None:
        limit = month.get("limit_usd")
        of = f" of {_usd(limit)}" if _num(limit) else ""
        lines.append(f"this month: {_usd(month.get('used_usd'))}{of}")
    routines = rows(status.get("routines"))
    routines.sort(key=lambda r: _num(r.get("next_fire")) or math.inf)
    if routines:
        lines.append("next routines:")
        for r in routines[:max_routines]:
            last = f" (last: {_txt(r.get('last_outcome'), 20)})" if r.get("last_outcome") else ""
            lines.append(
                f"  {_when(nxt) if (nxt := r.get('next_fire')) else 'not scheduled'} "
                f"{_txt(r.get('routine'), 60)} → "
                f"{_txt(r.get('agent'), 40)}{last}"
            )
    return clip("\n".join(lines))


def _scalar(key: str, value: Any) -> str:
    k = key.lower()
    n = _num(value) if not isinstance(value, str) else None
    if n is not None:
        if k.endswith("usd") or k in ("cost", "spend", "limit", "used", "remaining"):
            return _usd(n)
        if (k.endswith(("_ts", "_at")) or k in ("ts", "next_fire", "last_fire")) and n > 1e9:
            return _when(n)
        if k.endswith(("_pct", "_rate", "_ratio")) or k == "level":
            return _pct(n)
        if isinstance(value, float):
            return f"{value:.4g}"
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _txt(value, 200)


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
                out.append(f"{pad}{ks}: {_txt(v, 200)}")
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
