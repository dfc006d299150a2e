"""What the operator can do from the phone: commands and button actions (private).

Part of :mod:`companyd.alerts._service`. Each command and button calls the daemon's
:class:`~companyd.admin.Admin` with a bounded wait and turns the result into a short
text; :class:`~companyd.admin.AdminError` messages are shown as they are (they quote
the value and name the choices). What decides a reply reads the result's attributes
(``Resumed.resumed``); what shows a result renders its JSON form
(:func:`companyd.admin._wire.result_data`), as the CLI does. Nothing here touches Telegram.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from companyd.admin import (
    Admin,
    AdminError,
    AdminStopping,
    DeskDecision,
    Inbox,
    result_data,
    waiting_text,
)
from companyd.alerts._outbox import AlertRecord
from companyd.alerts._render_status import (
    format_budget,
    format_jobs,
    format_quarantine,
    format_result,
    format_spend,
    format_status,
)
from companyd.alerts._values import usd as say_usd

__all__ = [
    "ADMIN_TIMEOUT",
    "COMMANDS",
    "act",
    "buttons_after",
    "command_reply",
    "format_inbox",
    "help_text",
    "refusal_text",
]

log = logging.getLogger("companyd.alerts.service")

#: The ``via`` of every action from the phone (recorded as an ``operator_action``).
_VIA = "telegram"

#: Bound on one Admin call made from the phone (/ask has its own), real seconds: an I/O
#: deadline, so the operator hears "no answer" instead of nothing.
ADMIN_TIMEOUT = 30.0

COMMANDS: tuple[tuple[str, str], ...] = (
    ("status", "supervision tree, runs, spend, next routines"),
    ("spend", "spend: /spend [agent|model|routine|day] [today|month]"),
    ("budget", "each budget: limit, used, remaining"),
    ("jobs", "routines: next fire, last outcome"),
    ("pause", "/pause AGENT: no new runs"),
    ("resume", "/resume AGENT: run again"),
    ("ask", "/ask AGENT question: one-off task"),
    ("inbox", "what waits for you, oldest first"),
    ("approve", "/approve ID: a tool call, a result or a proposal"),
    ("reject", "/reject ID [REASON]: a tool call, a result or a proposal"),
    ("answer", "/answer ID TEXT: an agent's question, or changes to a result"),
    ("quarantine", "quarantined tasks"),
    ("retry", "/retry ID: run a quarantined task again"),
    ("help", "these commands"),
)


def help_text() -> str:
    """The /help text: one line per command with what it does, and what a reply does."""
    return (
        "commands:\n"
        + "\n".join(f"/{n} — {d}" for n, d in COMMANDS)
        + "\nreply to a result or an answer: a follow-up to the same agent, in its thread"
    )


#: How each inbox action is written on the phone.
_PHONE_ACTIONS = {
    "approve": "/approve {id}",
    "reject": "/reject {id} [REASON]",
    "answer": "/answer {id} TEXT (or reply to the question)",
    "changes": "reply to the result with the changes you want",
    "retry": "/retry {id}",
}


def format_inbox(inbox: Inbox, now: float | None = None) -> str:
    """``/inbox``: what waits for the founder, oldest first, each with how long it has
    waited, when it expires (``now``: the pager's clock) and its commands.
    """
    items = inbox.items
    if not items:
        return "📥 nothing waits for you"
    lines = [f"📥 {len(items)} waiting for you, oldest first"]
    for i in items[:20]:
        lines.append(f"• {i.kind} {i.id}: {i.summary}")
        if now is not None:
            lines.append(f"   {waiting_text(i.created, i.deadline, now, i.kind)}")
        acts = [_PHONE_ACTIONS[a].format(id=i.id) for a in i.actions if a in _PHONE_ACTIONS]
        if acts:
            lines.append("   " + " · ".join(acts))
    if len(items) > 20:
        lines.append(f"… and {len(items) - 20} more: `companyd inbox`")
    return "\n".join(lines)


def refusal_text(exc: AdminError) -> str:
    """How a message on the phone shows an Admin refusal: "⚠️" and its message — except a
    stop's answer (:class:`~companyd.admin.AdminStopping`), which is no failure: "⏹" and
    its message, which says what became of the request (nothing was asked, or the task is
    kept and resumes after the restart) and what to do. The one wording of /ask, a command,
    a reply and a follow-up; a button's popup shows the message alone (:func:`act`).
    """
    if isinstance(exc, AdminStopping):
        return f"⏹ {exc}"
    return f"⚠️ {exc}"


def _agents_hint(agents: Collection[str]) -> str:
    return ", ".join(sorted(agents)) or "(none)"


def _told(mark: str, title: str, data: Mapping[str, Any]) -> str:
    """A command's answer as the CLI prints it: the result's own ``message`` when it has one
    (``paused cfo: it finishes its current run, …``), else the title and its fields.
    """
    message = data.get("message")
    if isinstance(message, str) and message.strip():
        return f"{mark} {message.strip()}"
    return format_result(f"{mark} {title}", data)


async def command_reply(
    admin: Admin,
    name: str,
    args: Sequence[str],
    agents: Collection[str],
    by: str = "",
    now: float | None = None,
) -> str:
    """The reply text for one command (Admin errors shown as they are); ``by``: who sent
    it, kept with a decision on the founder's desk.
    """
    a = admin
    try:
        async with asyncio.timeout(ADMIN_TIMEOUT):
            if name in ("help", "start"):
                return help_text()
            if name == "status":
                return format_status(result_data("status", await a.status()))
            if name == "spend":
                by, period = "agent", "today"
                for w in args:
                    if w in ("agent", "model", "routine", "day"):
                        by = w
                    else:
                        period = w
                spend = await a.spend(by, period)
                return format_spend(result_data("spend", spend))
            if name == "budget":
                return format_budget(result_data("budget", await a.budget()))
            if name == "jobs":
                return format_jobs(result_data("jobs", await a.jobs()))
            if name == "quarantine":
                tasks = await a.tasks(quarantined=True)
                return format_quarantine(result_data("tasks", tasks))
            if name in ("pause", "resume"):
                if len(args) != 1:
                    return f"usage: /{name} AGENT (agents: {_agents_hint(agents)})"
                if name == "pause":
                    paused = await a.pause(args[0], via=_VIA)
                    return _told("⏸", f"paused {args[0]}", result_data("pause", paused))
                if args[0] == "all" and "all" not in agents:
                    every = await a.resume_all(via=_VIA)
                    return _told("▶", "resume all", result_data("resume_all", every))
                resumed = await a.resume(args[0], via=_VIA)
                title = f"resumed {args[0]}"
                if not resumed.resumed:
                    title = f"{args[0]} was not paused (nothing to resume)"
                return _told("▶", title, result_data("resume", resumed))
            if name == "inbox":
                return format_inbox(await a.inbox(), now)
            if name == "answer":
                if len(args) < 2:
                    return "usage: /answer ID TEXT (or reply to the question's message)"
                said = await a.answer(args[0], " ".join(args[1:]), by=by, via=_VIA)
                return f"💬 {said.message}"
            if name == "reject" and len(args) > 1:
                why = " ".join(args[1:])
                return f"✖ {(await a.reject(args[0], why, by=by, via=_VIA)).message}"
            if name in ("approve", "reject", "retry"):
                if len(args) != 1:
                    what = "TASK_ID" if name == "retry" else "ID"
                    return f"usage: /{name} {what}" + (" [REASON]" if name == "reject" else "")
                if name == "approve":
                    done = await a.approve(args[0], by=by, via=_VIA)
                    if isinstance(done, DeskDecision):
                        return f"✅ {done.message}"
                    return _told("✅", f"approved {args[0]}", result_data("approve", done))
                if name == "reject":
                    done = await a.reject(args[0], by=by, via=_VIA)
                    if isinstance(done, DeskDecision):
                        return f"✖ {done.message}"
                    return _told("✖", f"rejected {args[0]}", result_data("reject", done))
                retried = result_data("retry", await a.retry(args[0], via=_VIA))
                return _told("🔁", f"retrying {args[0]}", retried)
    except AdminError as exc:
        return refusal_text(exc)
    except TimeoutError:
        if name == "approve" and len(args) == 1:
            return f"⏳ {_approving(args[0])}"
        return f"⚠️ /{name} got no answer within {ADMIN_TIMEOUT:.0f} s; try again later"
    except Exception as exc:
        log.exception("alerts: /%s failed", name)
        return f"⚠️ /{name} failed inside companyd ({type(exc).__name__}); see the daemon log"
    return f"unknown command /{name}.\n{help_text()}"


def _approving(item: str) -> str:
    """What an approval that outlasts the phone's wait says: a proposal's (apply, reload)
    runs to the end without its caller (:meth:`Admin.approve`), so "try again" would be
    wrong — the next try finds it decided.
    """
    return (
        f"approving {item} takes longer than {ADMIN_TIMEOUT:.0f} s (a proposal is applied "
        "and the company reloaded); it goes on: /inbox shows whether it still waits"
    )


async def act(admin: Admin, button: Mapping[str, Any], by: str = "") -> tuple[bool, str]:
    """Do what a button stands for (``by``: who pressed it, kept with a desk decision).
    Returns (done, what to tell).
    """
    a, action, arg = admin, button.get("action"), str(button.get("arg") or "")
    try:
        async with asyncio.timeout(ADMIN_TIMEOUT):
            if action == "pause":
                await a.pause(arg, via=_VIA)
                return True, f"paused {arg}"
            if action == "resume":
                if not (await a.resume(arg, via=_VIA)).resumed:
                    # Resumed meanwhile (by /resume, another button, a budget raise): say so
                    # rather than claim an action that did nothing.
                    return True, f"{arg} was not paused (nothing to resume)"
                return True, f"resumed {arg}"
            if action == "raise":
                usd = float(button.get("usd") or 0)
                await a.raise_budget(arg or None, usd, via=_VIA)
                return True, f"raised {arg or 'the company'}'s budget for today by {say_usd(usd)}"
            if action == "approve":
                done = await a.approve(arg, by=by, via=_VIA)
                if isinstance(done, DeskDecision):
                    return True, done.message
                return True, f"approved proposal {arg}"
            if action == "reject":
                done = await a.reject(arg, by=by, via=_VIA)
                if isinstance(done, DeskDecision):
                    return True, done.message
                return True, f"rejected proposal {arg}"
            if action == "changes":
                # the change itself is text: the founder replies to the result's message
                return False, "reply to this message with the changes you want"
            if action == "retry":
                await a.retry(arg, via=_VIA)
                return True, f"retrying task {arg}"
            if action == "run_job":
                # what became of the fire, as `companyd jobs run` says it: ended (how),
                # its result waiting for approval, or its run waiting for the founder
                return True, (await a.run_job(arg, via=_VIA)).message
            if action == "approve_tools":
                agent, _, server = arg.partition("/")
                approved = await a.tools_approve(server, agent or None, via=_VIA)
                names = ", ".join(str(t.get("tool")) for t in approved.approved)
                if not names:
                    return True, f"nothing of {server} was held back any more"
                return True, f"approved {names} of {server} for {agent}; offered now"
    except AdminStopping as exc:
        # the daemon began to stop: done if what was asked was started (a fire made: its
        # run resumes after the restart), not done otherwise — said as such, not refused
        return exc.done, str(exc)
    except AdminError as exc:
        return False, str(exc)
    except TimeoutError:
        if action == "run_job":
            # the fire is the scheduler's and goes on without its caller: pressing again
            # would not "try again" but skip (or start a second run)
            return True, (
                f"started routine {arg}; its run has not ended within {ADMIN_TIMEOUT:.0f} s "
                "and goes on: /jobs shows its outcome once it ends"
            )
        if action == "approve":
            return False, _approving(arg)
        return False, f"companyd did not answer within {ADMIN_TIMEOUT:.0f} s; try again"
    except Exception as exc:
        log.exception("alerts: button %r failed", action)
        return False, f"failed inside companyd ({type(exc).__name__}); see the daemon log"
    return False, f"unknown action {action!r}"


def buttons_after(rec: AlertRecord, pressed: Mapping[str, Any]) -> None:
    """Buttons after an action: a pause offers resume and vice versa; a decided proposal
    or a retried task offers nothing more; raising and re-running stay available.
    """
    action, arg = pressed.get("action"), pressed.get("arg")
    keep = [b for b in rec.buttons if b is not pressed]
    if action in ("approve", "reject"):
        keep = [b for b in keep if b.get("action") not in ("approve", "reject", "changes")]
    elif action in ("raise", "run_job"):
        keep = rec.buttons
    rec.buttons = list(keep)
    if action in ("pause", "resume"):
        rec.buttons = [
            b
            for b in rec.buttons
            if not (b.get("action") in ("pause", "resume") and b.get("arg") == arg)
        ]
        flip = "resume" if action == "pause" else "pause"
        label = f"▶ Resume {arg}" if flip == "resume" else f"⏸ Pause {arg}"
        rec.buttons.append(
            {"id": rec.next_button, "label": label, "action": flip, "arg": arg, "usd": None}
        )
        rec.next_button += 1
