"""What each event kind says: event kind → title, detail lines and buttons.

One renderer (and optionally one button maker) per kind in :data:`KINDS`, plus a generic
one for kinds it does not know; :func:`render` picks and runs them and never raises.
Everything here is pure (no I/O, no clock reads) and total: any ``data`` mapping, however
incomplete or mistyped, renders to *some* readable text. Events are typed (their classes key
:data:`KINDS`), but what is rendered is an *alert*: the merged ``data`` of every event
coalesced into it (a ``child_exited`` and the ``restart`` after it), kept in the outbox and
rendered again later, possibly by another version — so a missing or odd field costs detail,
never the alert. The fields of each kind are its class's (docs/events.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import tzinfo
from typing import Any

from companyd.alerts._render import Button, KindSpec, Rendered, Renderer
from companyd.alerts._values import (
    Data,
    has,
    line,
    num,
    pct,
    result_cost,
    secs,
    times_in,
    txt,
    usd,
    usd_of,
    when,
)
from companyd.events import (
    AgentPaused,
    AgentResumed,
    ApiKeyRefused,
    ApiSpendLimit,
    BudgetExhausted,
    BudgetThreshold,
    ChildExited,
    ChildStartFailed,
    CircuitBreaker,
    ConfigRejected,
    DaemonReloaded,
    DaemonStarted,
    DaemonStopping,
    FounderApprovalRequested,
    FounderQuestion,
    FounderReminder,
    FounderResultForApproval,
    LeadershipTaken,
    MaxIntensity,
    McpServerFailed,
    McpServerRecovered,
    MemoryRepaired,
    ModelFallback,
    ProposalCreated,
    QuotaWall,
    QuotaWallLifted,
    Restart,
    ResultUndelivered,
    RoutineFailed,
    RoutineLimitReached,
    RoutineMissed,
    RoutinePaused,
    RoutineSkipped,
    RoutineUnverified,
    RunFailed,
    SpendRunaway,
    SpendUnanswered,
    TaskQuarantined,
    TelegramCommandsFailing,
    TelegramCommandsRecovered,
    ToolRateLimited,
    ToolsQuarantined,
    UnknownModelPrice,
)

__all__ = [
    "KINDS",
    "RAISE_STEP_USD",
    "agent_of",
    "is_abnormal_exit",
    "kind_spec",
    "render",
    "story_count",
]

#: What the "raise today's budget" button adds, in USD. Fixed on purpose: one tap must never
#: authorise an open-ended amount; the operator taps again (or uses the CLI) for more.
RAISE_STEP_USD = 5.0


def agent_of(data: Data, agents: Collection[str] = ()) -> str | None:
    """The agent an event is about: ``data.agent``, else a supervisor ``child`` id that names
    an agent (``cfo``, ``agent:cfo``, ``agents/cfo``).
    """
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
    return agent_of(data) or txt(data.get("child"), 80)


def is_abnormal_exit(reason: Any) -> bool:
    """False for OTP's normal exits: ``normal``, ``shutdown``, ``shutdown:<info>`` (the
    supervisor's spelling) or ``{shutdown, <info>}`` (Erlang's).
    """
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
        title = f"{who} crashed and was not restarted" + (f" ({txt(kind, 20)})" if kind else "")
    lines = line("last reason" if n > 1 else "reason", data, "reason")
    if has(data, "restarts"):
        if has(data, "max_restarts"):
            within = data.get("max_seconds", data.get("within_seconds"))
            restarts = num(data.get("restarts"))
            # the story counts every crash; the supervisor's count starts again when the
            # supervisor itself is restarted (it gave up): said so, not "5 crashes … 1"
            again = n > 1 and restarts is not None and restarts < n - 1
            lines.append(
                f"restarts in the last {secs(within)}: {txt(data.get('restarts'))} "
                + (
                    f"(counted again since its supervisor was restarted; it gives up above "
                    f"{txt(data.get('max_restarts'))})"
                    if again
                    else f"(the supervisor gives up above {txt(data.get('max_restarts'))})"
                )
            )
        else:
            lines.append(f"restart count: {txt(data.get('restarts'))}")
    if data.get("gave_up") and has(data, "message"):
        lines.append(txt(data.get("message"), 400))
    lines.append(f"supervisor: {txt(source, 120)}")
    return Rendered(title=title, lines=tuple(lines))


def _crash_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    agent = agent_of(data, agents)
    return (
        [Button(label=f"⏸ Pause {agent}", action="pause", arg=agent)]
        if agent and agent in agents
        else []
    )


def _max_intensity(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    restarts = data.get("restarts")
    limit = data.get("max_restarts")
    within = data.get("max_seconds", data.get("within_seconds"))
    lines: list[str] = []
    if restarts is not None or limit is not None:
        lines.append(
            f"{txt(restarts)} restarts in {secs(within)} — more than its limit of {txt(limit)}"
        )
    elif has(data, "message"):
        lines.append(txt(data.get("message"), 400))
    if has(data, "child"):
        lines.append(f"last to fail: {txt(data.get('child'))}: {txt(data.get('reason'))}")
    elif has(data, "reason"):
        lines.append(f"reason: {txt(data.get('reason'))}")
    parent = source.rpartition("/")[0]
    action = data.get("parent_action")
    if counts.get("restart") or action == "restart":
        lines.append(f"it stopped its children and exited; its supervisor {parent} restarted it")
    elif action == "none":
        kind = data.get("restart_type")
        lines.append(
            f"it stopped its children and exited; its supervisor {parent} did not restart it"
            + (f" ({txt(kind, 20)})" if kind else "")
            + ": its subtree stays down until restarted by hand"
        )
    else:
        lines.append(
            "it stopped its children and exited; its parent restarts it, or companyd stops "
            "if it is the root"
        )
    n = counts.get("max_intensity", 1)
    times = f" {n} times" if n > 1 else ""
    return Rendered(title=f"supervisor {txt(source, 120)} gave up{times}", lines=tuple(lines))


def _start_failed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    who = _who(data) if has(data, "child") or has(data, "agent") else "a supervisor"
    return Rendered(
        title=f"{who} failed to start",
        lines=(
            *line("reason", data, "reason"),
            *line("while", data, "phase"),
            f"supervisor: {txt(source, 120)}",
        ),
    )


#: How a flag that is on reads in an alert (``daemon_started``, :func:`_generic`; a flag
#: not named here reads as its name).
_FLAGS = {"offline": "offline mode: no model is called"}


def _daemon_started(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = counts.get("daemon_started", 1)
    planned = data.get("planned_stop")
    if planned:  # a deliberate restart (SIGTERM, systemctl restart): not a loop
        title = "companyd restarted (planned)" if n <= 1 else f"companyd restarted {n} times"
    else:
        title = "companyd started" if n <= 1 else f"companyd started {n} times — restart loop?"
    parts = [
        f"{txt(data.get(key))} {key if data.get(key) != 1 else key[:-1]}"  # "1 agent"
        for key in ("agents", "routines")
        if has(data, key)
    ]
    lines = [", ".join(parts)] if parts else []
    if data.get("offline") is True:
        lines.append(_FLAGS["offline"])
    lines += line("version", data, "version") + line("config", data, "config")
    if planned:
        lines.append(f"after a planned stop: {txt(planned, 200)}")
    lines += _config_warnings(data)
    return Rendered(title=title, lines=tuple(lines))


def _config_warnings(data: Data) -> list[str]:
    """The first three of company.yaml's ``warnings`` (a start's, a reload's): the file
    loaded, but something in it is likely not what the founder meant (a budget no call fits
    in, an anchor nothing uses…) — said in the message, not only in the journal.
    """
    warnings = data.get("warnings")
    if not isinstance(warnings, list) or not warnings:
        return []
    n = len(warnings)
    lines = [f"⚠ company.yaml has {n} warning{'s' if n != 1 else ''}:"]
    lines += [f"• {txt(w, 400)}" for w in warnings[:3]]
    if n > 3:
        lines.append(f"… and {n - 3} more: `companyd validate` lists them")
    return lines


def _leadership_taken(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered(
        title=f"companyd on {txt(data.get('host'), 80)} took over the company",
        lines=(
            f"previous leader: {txt(data.get('previous'), 160)} — it stopped holding the lead "
            "(died, lost its host or its database connection)",
            f"fencing epoch {txt(data.get('epoch'))}: the old leader can no longer write",
            "interrupted runs resume from the shared journal; check the old host",
        ),
    )


def _daemon_stopping(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered(title="companyd is stopping", lines=tuple(line("reason", data, "reason")))


def _daemon_reloaded(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines: list[str] = []
    changes = data.get("changes")
    if isinstance(changes, list):
        lines += [f"• {txt(c, 200)}" for c in changes[:10]]
        if len(changes) > 10:
            lines.append(f"… and {len(changes) - 10} more")
    elif has(data, "changes"):
        lines.append(txt(changes))
    for key, label in (
        ("started", "agents started"),
        ("stopped", "agents stopped"),
        ("restarted", "agents restarted"),
    ):
        value = data.get(key)
        if isinstance(value, list):
            if value:
                lines.append(f"{label}: {txt(', '.join(map(str, value)), 300)}")
        elif has(data, key):
            lines.append(f"{label}: {txt(value, 300)}")
    routines = data.get("routines")
    if isinstance(routines, Mapping):
        for key in ("added", "removed", "changed"):
            names = routines.get(key)
            if isinstance(names, list) and names:
                lines.append(f"routines {key}: {txt(', '.join(map(str, names)), 300)}")
    elif has(data, "routines") and routines != {}:
        lines.append(f"routines: {txt(routines, 300)}")
    if not lines and has(data, "unchanged"):
        lines.append("no agent changed")
    pending = data.get("restart_required")
    if isinstance(pending, list) and pending:
        names = txt(", ".join(map(str, pending)), 300)
        lines.append(f"waiting for a restart: {names} (`systemctl restart companyd`)")
    # what the tree could not apply (an agent that failed to start): "agents started: x"
    # above lists x all the same, so the title and a line each say it did not happen
    failures = data.get("failures")
    title = "company.yaml reloaded"
    if isinstance(failures, list) and failures:
        n = len(failures)
        title += f", {n} change{'' if n == 1 else 's'} not applied"
        lines += [f"not applied: {txt(f, 300)}" for f in failures[:5]]
        if n > 5:
            lines.append(f"… and {n - 5} more — see `journalctl -u companyd`")
    lines += _config_warnings(data)
    return Rendered(title=title, lines=tuple(lines))


def _config_rejected(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    errors = data.get("errors")
    lines: list[str] = []
    if isinstance(errors, list):
        count = data.get("count")
        total = count if isinstance(count, int) else len(errors)
        lines += [f"• {txt(e, 300)}" for e in errors[:5]]
        if total > min(5, len(errors)):
            lines.append(f"… and {total - min(5, len(errors))} more — run `companyd validate`")
    elif has(data, "errors"):
        lines.append(txt(errors, 600))
    lines += line("file", data, "file")
    return Rendered(
        title="company.yaml change rejected — the running config stays", lines=tuple(lines)
    )


def _budget_who(data: Data) -> str:
    agent = data.get("agent")
    if data.get("scope") == "company" or not agent:
        return "the company"
    return txt(agent, 80)


def _period(data: Data) -> str:
    p = data.get("period")
    return {"day": "daily", "today": "daily", "month": "monthly"}.get(str(p), txt(p, 40))


def _budget_threshold(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    used, limit = data.get("used_usd"), data.get("limit_usd")
    # the share spent, not the level crossed: one call can cross several levels at once
    # (only the highest is published) and end at 141% — "100%" would understate it
    spent = pct(None, used, limit)
    share = spent if spent != "?%" else pct(data.get("level"))
    title = f"{_budget_who(data)} has used {share} of its {_period(data)} budget"
    lines = [usd_of(used, limit)] if has(data, "used_usd") else []
    return Rendered(title=title, lines=tuple(lines))


def _raise_button(data: Data, agents: Collection[str]) -> list[Button]:
    agent = data.get("agent")
    if data.get("scope") == "company" or not agent:
        return [
            Button(
                label=f"➕ ${RAISE_STEP_USD:.0f} today (company)",
                action="raise",
                arg="",
                usd=RAISE_STEP_USD,
            )
        ]
    if agent in agents:
        return [
            Button(
                label=f"➕ ${RAISE_STEP_USD:.0f} today",
                action="raise",
                arg=str(agent),
                usd=RAISE_STEP_USD,
            )
        ]
    return []


def _budget_threshold_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    agent = data.get("agent")
    out = []
    if data.get("scope") != "company" and agent in agents:
        out.append(Button(label=f"⏸ Pause {agent}", action="pause", arg=str(agent)))
    return out + _raise_button(data, agents)


def _paused_list(data: Data) -> list[str]:
    paused = data.get("paused")
    if isinstance(paused, list) and paused:
        return [f"paused: {txt(paused, 200)}"]
    if paused is True:
        return [f"paused: {txt(data.get('agent'))}"]
    return []


def _budget_exhausted(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    needed, limit = num(data.get("needed_usd")), num(data.get("limit_usd"))
    if needed is not None and limit is not None and needed > limit:
        # not "reached": no call fits even in the whole budget, and waiting for the reset
        # changes nothing ("$0.00 of $0.05 … reached" read as a contradiction)
        title = f"{_budget_who(data)}'s {_period(data)} budget is too small for one call"
    else:
        title = f"{_budget_who(data)} reached its {_period(data)} budget"
    lines = []
    if has(data, "used_usd") or has(data, "limit_usd"):
        lines.append(usd_of(data.get("used_usd"), data.get("limit_usd")))
    left = num(data.get("remaining_usd"))
    if needed is not None and left is not None:
        # why, in the founder's terms: a call's worst case is set aside before it is sent,
        # so a budget can refuse with little (or nothing) spent — "$0.00 of $0.02" alone
        # reads as a contradiction
        who = txt(data.get("asked_by"), 80) if has(data, "asked_by") else "an agent"
        lines.append(
            f"the next call of {who} could cost up to {_amount(needed)}, more than the "
            f"{_amount(left)} left"
        )
    # The spend book's event names the agent whose call was refused (``asked_by``); the
    # runtime pauses exactly that agent (roles.agent), so that is who the operator resumes.
    lines += _paused_list(data) or line("paused", data, "asked_by")
    lines += line("resets", data, "resets_at", when)
    if needed is not None and limit is not None and needed > limit:
        lines.append(
            "no call fits until the budget is raised (companyd raise-budget, or company.yaml) "
            "or model.max_output_tokens is lowered"
        )
    else:
        lines.append("new runs wait until the budget resets or is raised")
    return Rendered(title=title, lines=tuple(lines))


def _amount(value: float) -> str:
    """Money in a sentence: exact, four decimals at least under a dollar (``$0.0694``,
    ``$0.016011``), else two, as a budget reads.
    """
    return usd(value, minimum=4 if value < 1 else 2)


def _budget_exhausted_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    out = _raise_button(data, agents)
    agent = data.get("agent")
    if data.get("scope") == "company" or not agent:
        agent = data.get("asked_by")
    if isinstance(agent, str) and agent in agents:
        out.append(Button(label=f"▶ Resume {agent}", action="resume", arg=agent))
    return out


def _api_spend_limit(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines = [*line("API says", data, "message"), *line("agent", data, "agent")]
    lines += _paused_list(data)
    if isinstance(data.get("action"), str) and data["action"]:
        lines.append(txt(data["action"]))  # the spend book's: "every agent is paused; …"
    else:
        lines.append(
            "top up or raise the limit in the Anthropic console, then resume them all: "
            "`companyd resume --all` (or /resume all)"
        )
    return Rendered(title="Anthropic API spend limit reached — calls refused", lines=tuple(lines))


def _quota_wall(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    until = txt(data.get("until_text"), 20)
    title = f"rate limited until {until}: {txt(data.get('agents'), 200)} paused"
    lines = [
        *line("models", data, "models"),
        *line("API says", data, "message"),
        f"every model these agents may use is rate limited past {until}: no call is made "
        f"until then, their routine fires are skipped, and they resume by themselves at {until}",
    ]
    return Rendered(title=title, lines=tuple(lines))


def _quota_wall_lifted(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered(
        title=f"rate limit lifted ({txt(data.get('until_text'), 20)}): "
        f"{txt(data.get('agents'), 200)} run again",
        lines=(),
    )


def _routine_limit(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = txt(data.get("max_runs_per_day"))
    title = f"routine {txt(data.get('routine'), 80)} reached max_runs_per_day ({n})"
    lines = [
        *line("agent", data, "agent"),
        f"its further fires on {txt(data.get('day'), 20)} are skipped; it runs again tomorrow",
    ]
    return Rendered(title=title, lines=tuple(lines))


def _routine_paused(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    routine = txt(data.get("routine"), 80)
    title = f"routine {routine} paused after {txt(data.get('failures'))} failed runs in a row"
    reasons = data.get("reasons")
    lines = [*line("agent", data, "agent")]
    if isinstance(reasons, list):
        lines += [f"• {txt(r, 300)}" for r in reasons[-5:]]
    lines.append(f"its fires are skipped until `companyd jobs resume {routine}`")
    return Rendered(title=title, lines=tuple(lines))


def _reminder_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    kind = data.get("item_kind")
    if kind == "approval":
        return _founder_buttons(data, agents)
    if kind == "result":
        return _result_buttons(data, agents)
    return []  # a question: answered by replying to it, or /answer


def _founder_reminder(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"⏰ still waiting for you: {txt(data.get('item_id'), 40)}"
    lines = [
        txt(data.get("summary"), 300),
        *line("asked", data, "created", when),
        *line("expires", data, "deadline", when),
        "unanswered by then, it is denied",
    ]
    return Rendered(title=title, lines=tuple(lines))


def _api_key_refused(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines = [*line("API says", data, "message"), *_paused_list(data)]
    lines.append(
        "fix the key (anthropic.api_key_env or the anthropic_api_key credential), restart "
        "companyd, then /resume the agents"
    )
    return Rendered(title="Anthropic API key refused — every agent is paused", lines=tuple(lines))


def _spend_unanswered(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = num(data.get("calls")) or counts.get("spend_unanswered", 1)
    total = num(data.get("total_worst_case_usd"))
    # small sums matter here (a call's worst case is often cents): exact, at least four
    # decimals under a dollar — as the event's own message says it
    amount = _amount(total) if total is not None else usd(total)
    title = f"{n:.0f} call{'s' if n != 1 else ''} timed out; up to {amount} may have been billed"
    lines = [
        "today, company-wide; counted against the budgets at their worst case",
        *line("last", data, "agent"),
        *line("reason", data, "reason"),
    ]
    return Rendered(title=title, lines=tuple(lines))


def _spend_runaway(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    factor = num(data.get("factor"))
    title = f"{_who(data)} is spending fast" + (f": {factor:.0f}× its usual rate" if factor else "")
    lines = []
    if has(data, "rate_usd_per_hour"):
        lines.append(
            f"{usd(data.get('rate_usd_per_hour'))}/h (usual "
            f"{usd(data.get('usual_usd_per_hour'))}/h)"
        )
    return Rendered(title=title, lines=tuple(lines))


def _pause_agent_button(data: Data, agents: Collection[str]) -> list[Button]:
    agent = agent_of(data, agents)
    return (
        [Button(label=f"⏸ Pause {agent}", action="pause", arg=agent)]
        if agent and agent in agents
        else []
    )


def _routine_failed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = counts.get("routine_failed", 1)
    title = f"routine {txt(data.get('routine'), 80)} failed" + (f" {n} times" if n > 1 else "")
    lines = [
        *line("agent", data, "agent"),
        *_outcome_line(data),
        *line("reason", data, "reason"),
        *_scheduled_line(data),
        *line("run", data, "run_id"),
    ]
    return Rendered(title=title, lines=tuple(lines))


def _routine_unverified(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = num(data.get("in_a_row"))
    times = "twice in a row" if n == 2 else f"{n:.0f} times in a row" if n and n > 2 else ""
    title = f"routine {txt(data.get('routine'), 80)}: unverified {times}".rstrip()
    lines = [
        *line("agent", data, "agent"),
        *line("why", data, "reason"),
        "its answer claims work the run's own record does not show; see `companyd runs "
        "show` for each condition and what the agent actually did",
        *_scheduled_line(data),
        *line("run", data, "run_id"),
    ]
    return Rendered(title=title, lines=tuple(lines))


def _outcome_line(data: Data) -> list[str]:
    """The scheduler's outcome when it says more than the title (``budget_exhausted``, …)."""
    outcome = data.get("outcome")
    if not has(data, "outcome") or outcome in ("failed", "missed", "skipped"):
        return []
    return [f"outcome: {txt(outcome, 40)}"]


def _scheduled_line(data: Data) -> list[str]:
    """The fire time: ``scheduled`` (ISO, as the scheduler sends it) or ``scheduled_for``."""
    key = "scheduled" if has(data, "scheduled") else "scheduled_for"
    return line("scheduled for", data, key, when)


def _routine_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    routine = data.get("routine")
    return (
        [Button(label="🔁 Run again now", action="run_job", arg=routine)]
        if isinstance(routine, str)
        else []
    )


def _routine_missed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = num(data.get("count"))
    many = n is not None and n > 1 and n.is_integer()
    runs = f"{n:.0f} runs" if many else "a run"
    title = f"routine {txt(data.get('routine'), 80)} missed {runs}"
    # The scheduler's summary at start names the first missed fire time and the latest one.
    fired = (
        line("first", data, "first", when) + line("last", data, "scheduled", when)
        if many
        else _scheduled_line(data)
    )
    lines = [*fired, *line("reason", data, "reason"), *line("agent", data, "agent")]
    return Rendered(title=title, lines=tuple(lines))


def _routine_skipped(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"routine {txt(data.get('routine'), 80)} skipped a run"
    lines = line("reason", data, "reason") + _scheduled_line(data) + line("agent", data, "agent")
    return Rendered(title=title, lines=tuple(lines))


def _task_quarantined(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"task {txt(data.get('task_id'), 80)} quarantined"
    if has(data, "crashes"):
        title += f" after {txt(data.get('crashes'))} crashes"
    errors = data.get("errors")
    last_error = errors[-1] if isinstance(errors, list) and errors else None
    lines = [
        *line("agent", data, "agent"),
        *line("routine", data, "routine"),
        *line("reason", data, "reason"),
        *([f"last error: {txt(last_error, 300)}"] if last_error is not None else []),
        *line("attempts", data, "attempts"),
        *line("task", data, "prompt", lambda v: txt(v, 200)),
    ]
    if has(data, "task_id"):
        lines.append(f"retry with /retry {txt(data.get('task_id'), 80)}")
    return Rendered(title=title, lines=tuple(lines))


def _task_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    task = data.get("task_id")
    return (
        [Button(label="🔁 Retry task", action="retry", arg=task)]
        if isinstance(task, str) and task
        else []
    )


def _result_undelivered(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = (
        f"the result of routine {txt(data.get('routine'), 80)} was not delivered to "
        f"{txt(data.get('to'), 20)}"
    )
    return Rendered(
        title=title, lines=tuple(line("reason", data, "reason") + line("run", data, "run_id"))
    )


def _memory_repaired(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines: list[str] = []
    if has(data, "summary"):
        lines.append(txt(data.get("summary"), 300))
    counts_line = [
        f"{k}: {txt(data.get(k))}"
        for k in ("kept", "dropped", "fixed", "quarantined_lines", "merged_entities")
        if has(data, k) and data.get(k) not in (0, None)
    ]
    if counts_line:
        lines.append(", ".join(counts_line))
    lines += line("file", data, "path") + line("backup", data, "backup")
    lines += line("unreadable lines kept in", data, "corrupt_file")
    lines += line("reason", data, "reason")
    return Rendered(title="memory file repaired", lines=tuple(lines))


def _commands_failing(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines = [*line("since", data, "since", when), *line("error", data, "error")]
    lines.append(
        "alerts still go out; companyd keeps polling with backoff. Check the bot token "
        "and alerts.telegram.api_url; `companyd status` shows the state"
    )
    return Rendered(title="Telegram commands are not reaching companyd", lines=tuple(lines))


def _commands_recovered(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    lines = [*line("failing since", data, "since", when), *line("last error", data, "error")]
    return Rendered(title="Telegram commands work again", lines=tuple(lines))


def _mcp_server_failed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = (
        f"MCP server {txt(data.get('server'), 80)!r} of {_who(data)} failed; running "
        "without its tools"
    )
    lines = line("reason", data, "reason")
    retry = data.get("retry_in_s")
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        lines.append(f"retrying in {retry:g} s, then with growing waits (up to 5 min)")
    return Rendered(title=title, lines=tuple(lines))


def _mcp_server_recovered(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"MCP server {txt(data.get('server'), 80)!r} of {_who(data)} is up again"
    tools = data.get("tools")
    lines = [f"tools: {txt(', '.join(map(str, tools)), 300)}"] if isinstance(tools, list) else []
    return Rendered(title=title, lines=tuple(lines))


def _tool_rate_limited(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = (
        f"{_who(data)} reached the daily limit of {txt(data.get('tool'), 80)!r}; further "
        "calls today are refused"
    )
    lines = [
        f"limit: {txt(data.get('limit'))} a day (tools.rate_limit), day {txt(data.get('day'))}"
    ]
    return Rendered(title=title, lines=tuple(lines))


def _tools_quarantined(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = (
        f"MCP server {txt(data.get('server'), 80)!r} of {_who(data)} offers new or changed "
        "tools; they are held back"
    )
    tools = data.get("tools")
    lines = (
        [f"{txt(k, 80)}: {txt(v, 120)}" for k, v in list(tools.items())[:8]]
        if isinstance(tools, dict)
        else []
    )
    lines.append(f"approve them: companyd tools approve {txt(data.get('server'), 80)}")
    return Rendered(title=title, lines=tuple(lines))


def _approve_tools_button(data: Data, agents: Collection[str]) -> list[Button]:
    agent, server = data.get("agent"), data.get("server")
    if not isinstance(agent, str) or not isinstance(server, str) or agent not in agents:
        return []
    return [
        Button(
            label=f"✅ Approve {server}'s tools", action="approve_tools", arg=f"{agent}/{server}"
        )
    ]


def _circuit_breaker(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"circuit breaker stopped a run of {_who(data)}"
    lines = []
    # Which limit: ``breaker`` (documented) or ``limit`` as a name (the agent runtime's
    # spelling, with ``reason`` telling the numbers).
    name = data.get("breaker")
    if name is None and isinstance(data.get("limit"), str):
        name = data.get("limit")
    if name is not None:
        what = txt(name, 60)
        if has(data, "value"):
            what += f": {txt(data.get('value'))} (limit {txt(data.get('limit'))})"
        lines.append(what)
    lines += line("reason", data, "reason") + line("routine", data, "routine")
    lines += line("run", data, "run_id")
    return Rendered(title=title, lines=tuple(lines))


def _proposal_created(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    pid = txt(data.get("proposal_id"), 60)
    head = f"proposal {pid} awaits approval"
    if has(data, "title"):
        head += f": {txt(data.get('title'), 120)}"
    lines = [
        *line("for", data, "agent"),
        *line("from", data, "proposer"),
        *line("why", data, "reason", _summary),
        *line("summary", data, "summary", _summary),
    ]
    diff = data.get("diff")
    if isinstance(diff, str) and diff.strip():
        shown = diff.strip().splitlines()
        lines += shown[:25] + ([f"… {len(shown) - 25} more diff lines"] if len(shown) > 25 else [])
    if has(data, "proposal_id"):
        lines.append(f"/approve {pid} or /reject {pid}")
    return Rendered(title=head, lines=tuple(lines))


def _summary(value: Any) -> str:
    return txt(value, 800)


def _proposal_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    pid = data.get("proposal_id")
    if not isinstance(pid, str | int) or isinstance(pid, bool) or pid == "":
        return []
    return [
        Button(label="✅ Approve", action="approve", arg=str(pid)),
        Button(label="✖ Reject", action="reject", arg=str(pid)),
    ]


def _founder_approval(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    item = txt(data.get("item_id"), 40)
    title = f"{_who(data)} wants to call {txt(data.get('tool'), 80)} — approve? ({item})"
    lines = [*line("arguments", data, "input", _summary), *line("why", data, "reason", _summary)]
    lines += line("routine", data, "routine") + line("run", data, "run_id")
    if has(data, "deadline"):
        lines.append(f"unanswered by {when(data.get('deadline'))} counts as rejected")
    lines.append(f"/approve {item} or /reject {item} REASON")
    return Rendered(title=title, lines=tuple(lines))


def _founder_question(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    item = txt(data.get("item_id"), 40)
    lines = [txt(data.get("question"), 1500)]
    lines += line("routine", data, "routine") + line("run", data, "run_id")
    if has(data, "deadline"):
        lines.append(f"the run waits for your answer until {when(data.get('deadline'))}")
    lines.append(f"reply to this message with your answer, or /answer {item} TEXT")
    return Rendered(title=f"{_who(data)} asks you ({item})", lines=tuple(lines))


#: How much of a result waiting for approval its message shows (Telegram's 4,096 characters
#: also hold the title, the cost line and what to do).
APPROVAL_SHOWN = 3000


def _founder_result(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    item = txt(data.get("item_id"), 40)
    title = f"{txt(data.get('routine'), 80)} by {_who(data)} awaits your approval ({item})"
    if num(data.get("round")) and (num(data.get("round")) or 0) > 1:
        title += f", round {txt(data.get('round'))}"
    answer = data.get("answer")
    lines = [txt(answer, APPROVAL_SHOWN), "—"]
    if has(data, "unverified"):
        # said before the founder decides: the answer did not hold against the run's record
        lines.insert(0, f"⚠ unverified: {txt(data.get('unverified'), 600)}")
    if isinstance(answer, str) and len(answer) > APPROVAL_SHOWN:
        # Never let the founder approve what they were not shown without saying so.
        lines.append(
            f"⚠ only the first {APPROVAL_SHOWN:,} of {len(answer):,} characters are shown: read "
            f"the whole result with `companyd runs show {txt(data.get('run_id'), 40)}` before "
            "you approve"
        )
    if has(data, "cost_usd"):  # as the result's messages show it, simulated or not
        lines.append(f"cost {result_cost(data)} · run {txt(data.get('run_id'), 40)}")
    lines.append(f"reply to this message with the changes you want, or /approve {item}")
    return Rendered(title=title, lines=tuple(lines))


def _result_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    item = data.get("item_id")
    if not isinstance(item, str) or not item:
        return []
    return [
        Button(label="✅ Approve", action="approve", arg=item),
        Button(label="✏️ Request changes", action="changes", arg=item),
        Button(label="✖ Reject", action="reject", arg=item),
    ]


def _founder_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    item = data.get("item_id")
    if not isinstance(item, str) or not item:
        return []
    return [
        Button(label="✅ Approve", action="approve", arg=item),
        Button(label="✖ Reject", action="reject", arg=item),
    ]


def _run_failed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    n = counts.get("run_failed", 1)
    title = f"a run of {_who(data)} failed" + (f" ({n} runs)" if n > 1 else "")
    return Rendered(
        title=title, lines=tuple(line("reason", data, "reason") + line("run", data, "run_id"))
    )


def _agent_paused(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered(
        title=f"{_who(data)} paused",
        lines=tuple(line("reason", data, "reason") + line("by", data, "by")),
    )


def _agent_resumed(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered(title=f"{_who(data)} resumed", lines=tuple(line("by", data, "by")))


def _resume_button(data: Data, agents: Collection[str]) -> list[Button]:
    agent = agent_of(data, agents)
    return (
        [Button(label=f"▶ Resume {agent}", action="resume", arg=agent)]
        if agent and agent in agents
        else []
    )


def _model_fallback(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    title = f"{_who(data)} fell back to {txt(data.get('to_model'), 80)}"
    return Rendered(
        title=title, lines=tuple(line("from", data, "from_model") + line("reason", data, "reason"))
    )


def _unknown_price(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
    return Rendered(
        title=f"no price known for model {txt(data.get('model'), 80)}",
        lines=("it is charged at the most expensive known rate; add it under 'pricing'",),
    )


def _generic_line(key: str, value: Any) -> str | None:
    """One ``name: value`` line of :func:`_generic`, or None for a field that says nothing:
    no value (``routine: ?`` for an ``ask``) or a flag that is off (``offline: False``). A
    flag that is on is worded (:data:`_FLAGS`); an amount of money (``*_usd``) reads as
    money, never ``6e-05``.
    """
    if value is None or value is False:
        return None
    if value is True:
        return _FLAGS.get(key, key.replace("_", " "))
    money = key.endswith("_usd") or key == "usd"  # budget_raised's "usd": the raise
    return f"{key}: {usd(value) if money else txt(value, 200)}"


def _generic(kind: str) -> Renderer:
    def render(data: Data, source: str, counts: Mapping[str, int]) -> Rendered:
        title = kind.replace("_", " ")
        if source:
            title += f" ({txt(source, 80)})"
        lines = [
            line
            for line in (_generic_line(k, v) for k, v in list(data.items()))
            if line is not None
        ][:8]
        return Rendered(title=title, lines=tuple(lines))

    return render


_CRASH = KindSpec(group="crash", subject=("child",), render=_crash, buttons=_crash_buttons)

KINDS: Mapping[str, KindSpec] = {
    Restart.KIND: _CRASH,
    ChildExited.KIND: _CRASH,
    MaxIntensity.KIND: KindSpec(
        group="max_intensity", subject=(), render=_max_intensity, buttons=_crash_buttons
    ),
    ChildStartFailed.KIND: KindSpec(
        group="child_start_failed", subject=("child",), render=_start_failed
    ),
    # a start after a planned stop is its own story: only starts after an unplanned end
    # fold into "started N times — restart loop?"
    DaemonStarted.KIND: KindSpec(
        group="daemon_started", subject=("planned_stop",), render=_daemon_started
    ),
    DaemonStopping.KIND: KindSpec(group="daemon_stopping", subject=(), render=_daemon_stopping),
    LeadershipTaken.KIND: KindSpec(group="leadership_taken", subject=(), render=_leadership_taken),
    DaemonReloaded.KIND: KindSpec(group="daemon_reloaded", subject=(), render=_daemon_reloaded),
    ConfigRejected.KIND: KindSpec(group="config_rejected", subject=(), render=_config_rejected),
    BudgetThreshold.KIND: KindSpec(
        group="budget_threshold",
        subject=("scope", "agent", "period", "level"),
        render=_budget_threshold,
        buttons=_budget_threshold_buttons,
    ),
    BudgetExhausted.KIND: KindSpec(
        group="budget_exhausted",
        subject=("scope", "agent", "period"),
        render=_budget_exhausted,
        buttons=_budget_exhausted_buttons,
    ),
    ApiSpendLimit.KIND: KindSpec(group="api_spend_limit", subject=(), render=_api_spend_limit),
    ApiKeyRefused.KIND: KindSpec(group="api_key_refused", subject=(), render=_api_key_refused),
    SpendRunaway.KIND: KindSpec(
        group="spend_runaway",
        subject=("agent",),
        render=_spend_runaway,
        buttons=_pause_agent_button,
    ),
    SpendUnanswered.KIND: KindSpec(group="spend_unanswered", subject=(), render=_spend_unanswered),
    RoutineFailed.KIND: KindSpec(
        group="routine_failed",
        subject=("routine",),
        render=_routine_failed,
        buttons=_routine_buttons,
    ),
    RoutineMissed.KIND: KindSpec(
        group="routine_missed",
        subject=("routine",),
        render=_routine_missed,
        buttons=_routine_buttons,
    ),
    RoutineSkipped.KIND: KindSpec(
        group="routine_skipped", subject=("routine",), render=_routine_skipped
    ),
    RoutineUnverified.KIND: KindSpec(
        group="routine_unverified",
        subject=("routine",),
        render=_routine_unverified,
        buttons=_routine_buttons,
    ),
    RoutineLimitReached.KIND: KindSpec(
        group="routine_limit_reached", subject=("routine", "day"), render=_routine_limit
    ),
    RoutinePaused.KIND: KindSpec(
        group="routine_paused", subject=("routine",), render=_routine_paused
    ),
    QuotaWall.KIND: KindSpec(group="quota_wall", subject=("until_text",), render=_quota_wall),
    QuotaWallLifted.KIND: KindSpec(
        group="quota_wall_lifted", subject=("until_text",), render=_quota_wall_lifted
    ),
    FounderReminder.KIND: KindSpec(
        group="founder_reminder",
        subject=("item_id",),
        render=_founder_reminder,
        buttons=_reminder_buttons,
    ),
    TaskQuarantined.KIND: KindSpec(
        group="task_quarantined",
        subject=("task_id",),
        render=_task_quarantined,
        buttons=_task_buttons,
    ),
    MemoryRepaired.KIND: KindSpec(group="memory_repaired", subject=(), render=_memory_repaired),
    ResultUndelivered.KIND: KindSpec(
        group="result_undelivered", subject=("routine", "to"), render=_result_undelivered
    ),
    TelegramCommandsFailing.KIND: KindSpec(
        group="telegram_commands_failing", subject=(), render=_commands_failing
    ),
    TelegramCommandsRecovered.KIND: KindSpec(
        group="telegram_commands_recovered", subject=(), render=_commands_recovered
    ),
    McpServerFailed.KIND: KindSpec(
        group="mcp_server_failed", subject=("agent", "server"), render=_mcp_server_failed
    ),
    McpServerRecovered.KIND: KindSpec(
        group="mcp_server_recovered", subject=("agent", "server"), render=_mcp_server_recovered
    ),
    ToolRateLimited.KIND: KindSpec(
        group="tool_rate_limited", subject=("agent", "tool"), render=_tool_rate_limited
    ),
    ToolsQuarantined.KIND: KindSpec(
        group="tools_quarantined",
        subject=("agent", "server"),
        render=_tools_quarantined,
        buttons=_approve_tools_button,
    ),
    CircuitBreaker.KIND: KindSpec(
        group="circuit_breaker",
        subject=("agent", "breaker"),
        render=_circuit_breaker,
        buttons=_pause_agent_button,
    ),
    ProposalCreated.KIND: KindSpec(
        group="proposal_created",
        subject=("proposal_id",),
        render=_proposal_created,
        buttons=_proposal_buttons,
    ),
    FounderApprovalRequested.KIND: KindSpec(
        group="founder_approval_requested",
        subject=("item_id",),
        render=_founder_approval,
        buttons=_founder_buttons,
    ),
    FounderQuestion.KIND: KindSpec(
        group="founder_question", subject=("item_id",), render=_founder_question
    ),
    FounderResultForApproval.KIND: KindSpec(
        group="founder_result_for_approval",
        subject=("item_id",),
        render=_founder_result,
        buttons=_result_buttons,
    ),
    RunFailed.KIND: KindSpec(
        group="run_failed", subject=("agent",), render=_run_failed, buttons=_pause_agent_button
    ),
    AgentPaused.KIND: KindSpec(
        group="agent_paused", subject=("agent",), render=_agent_paused, buttons=_resume_button
    ),
    AgentResumed.KIND: KindSpec(group="agent_resumed", subject=("agent",), render=_agent_resumed),
    ModelFallback.KIND: KindSpec(
        group="model_fallback", subject=("agent", "to_model"), render=_model_fallback
    ),
    UnknownModelPrice.KIND: KindSpec(
        group="unknown_model_price", subject=("model",), render=_unknown_price
    ),
}


def kind_spec(kind: str) -> KindSpec:
    """The spec for ``kind``; unknown kinds get a generic one keyed by the ``agent``,
    ``child``, ``routine``, ``action`` and ``target`` fields (an ``operator_action``'s
    ``run_job`` and ``reload`` are two stories; the same action again is a repeat).
    """
    spec = KINDS.get(kind)
    if spec is not None:
        return spec
    return KindSpec(group=kind, subject=_GENERIC_SUBJECT, render=_generic(kind))


_GENERIC_SUBJECT = ("agent", "child", "routine", "action", "target")


def story_count(kind: str, counts: Mapping[str, int]) -> int:
    """How many events a story of ``kind`` tells, from its events' ``counts`` by kind (a
    crash story counts restarts, not exits; a supervisor's giving up counts its give-ups,
    not its parent's word on them).
    """
    if kind_spec(kind).group == "crash":
        return max(counts.get("restart", 0), counts.get("child_exited", 0), 1)
    if kind == MaxIntensity.KIND:
        return max(counts.get(kind, 0), 1)
    return max(sum(counts.values()), 1)


def story_key(kind: str, source: str, data: Data) -> str:
    """The coalescing key of an event: its kind's group, its source, its subject fields.

    A sub-supervisor that gave up (``max_intensity`` from ``companyd/agents/finance``) is
    told in its parent's crash story of that child (``companyd/agents``, ``finance``): the
    parent's exit and restart of it follow at once, and are the same incident: one message.
    """
    spec = kind_spec(kind)
    if kind == MaxIntensity.KIND and "/" in source:
        parent, _, child = source.rpartition("/")
        return f"{_CRASH.group}|{parent}|{child}"
    subject = "|".join(str(data.get(f, "")) for f in spec.subject)
    return f"{spec.group}|{source}|{subject}"


def joining_data(story_kind: str, kind: str, data: Data) -> Data:
    """What an event of ``kind`` adds to the data of the story (of ``story_kind``) it joins:
    all of it, except that a parent's exit and restart of a supervisor that gave up keep the
    story's own figures (its restarts, its last child to fail) and add only what the parent
    did with it.
    """
    if story_kind == MaxIntensity.KIND and kind != MaxIntensity.KIND:
        kept = {"action": "parent_action", "restart_type": "restart_type"}
        return {kept[k]: v for k, v in data.items() if k in kept}
    return data


def render(
    kind: str,
    data: Data,
    source: str,
    counts: Mapping[str, int],
    agents: Collection[str],
    tz: tzinfo | str = "UTC",
) -> tuple[Rendered, list[Button]]:
    """Title, lines and buttons for an alert, its times in ``tz`` (the company's zone, which
    the footer :func:`companyd.alerts._render.compose` adds is in too); never raises (falls
    back to a generic text).
    """
    spec = kind_spec(kind)
    with times_in(tz):
        try:
            rendered = spec.render(data, source, counts)
        except Exception:  # a renderer bug must not cost the alert
            rendered = _generic(kind)(data, source, counts)
    try:
        buttons = spec.buttons(data, agents)
    except Exception:
        buttons = []
    return rendered, buttons
