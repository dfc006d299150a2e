"""``companyd runs`` as text: the list with its short answer column, a run's transcript
(``runs show``) and a routine's latest result (``runs last``).

Pure formatting of the JSON the daemon (or the journal, offline) answers with
(:func:`companyd.runs._transcript.read_transcript`): long values are cut to a few hundred
characters here, each cut saying the value's full size; ``--json`` prints them as stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from companyd.admin import RUN_COST_PLACES, format_usd, format_when, usd_places
from companyd.runs import cut

__all__ = [
    "ANSWER_COLUMN",
    "answer_line",
    "delivery_lines",
    "last_lines",
    "run_list_lines",
    "transcript_lines",
    "verification_lines",
]

#: Width of the short answer in the list.
ANSWER_COLUMN = 60
#: Widest the routine column of the list grows (longer names end with "…").
ROUTINE_COLUMN = 24
#: How much of a tool's input or result, or a model's text, the transcript shows.
SHOWN_CHARS = 300


def when(ts: Any, tz: str, *, seconds: bool = False) -> str:
    """An epoch time in zone ``tz`` (the company's), the zone named:
    :func:`companyd.admin.format_when` (``-`` when absent).
    """
    if not isinstance(ts, int | float):
        return "-"
    return format_when(ts, tz, seconds=seconds)


def answer_line(run: Mapping[str, Any], width: int = ANSWER_COLUMN) -> str:
    """One line saying what a run produced: its answer's first line, or why it did not
    finish well, or which routine it runs for while it runs.
    """
    status = run.get("status")
    answer = " ".join(str(run.get("answer") or "").split())
    if status == "running":
        text = f"(running{' routine ' + str(run['routine']) if run.get('routine') else ''})"
    elif status != "ok" or not answer:
        text = str(run.get("reason") or answer or "")
    else:
        text = answer
    if len(text) > width:
        text = text[: width - 1] + "…"
    return text


def _places(costs: Iterable[Any]) -> int:
    """The decimals of one table's money: four (runs cost fractions of a cent), more where
    that is what it takes for every cost that is not zero to show as not zero.
    """
    return usd_places((float(c) for c in costs if c is not None), minimum=RUN_COST_PLACES)


def _money(cost: Any, places: int) -> str:
    return format_usd(float(cost or 0), places)


#: What a cost marked ``*`` (``runs``) or ``(simulated)`` is: the offline model's price.
SIMULATED_NOTE = (
    "simulated: the offline model's calls (companyd --offline), priced as Claude's would be — "
    "no money was spent on them"
)


def run_list_lines(runs: list[Mapping[str, Any]], tz: str = "UTC") -> list[str]:
    """The table of ``companyd runs``: one line per run, with when it started (in ``tz``,
    the company's zone) and the routine it ran for (``-``: asked by the founder or a
    colleague); the cost of a run on the offline model is marked ``*`` and explained under
    the table (simulated, no money spent).
    """
    width = max([len("routine"), *(len(str(r.get("routine") or "-")) for r in runs)])
    width = min(width, ROUTINE_COLUMN)
    money = _places(r.get("cost_usd") for r in runs)
    simulated = any(r.get("offline") for r in runs)
    cost_width = 9 if simulated else 8
    started = [when(r.get("started"), tz) for r in runs]
    at = max([len("started"), *(len(w) for w in started)])
    lines = [
        f"{'started':{at}} {'agent':12} {'routine':{width}} {'status':16} "
        f"{'cost':>{cost_width}} {'steps':>5} {'run':16}  answer / why"
    ]
    for r, began in zip(runs, started, strict=True):
        routine = str(r.get("routine") or "-")
        if len(routine) > width:
            routine = routine[: width - 1] + "…"
        cost = _money(r.get("cost_usd"), money)
        if simulated:
            cost += "*" if r.get("offline") else " "
        lines.append(
            f"{began:{at}} {r.get('agent')!s:12} {routine:{width}} "
            f"{r.get('status')!s:16} "
            f"{cost:>{cost_width}} {int(r.get('steps') or 0):5} "
            f"{r.get('run_id')!s:16}  {answer_line(r)}"
        )
    if simulated:
        lines.append(f"* {SIMULATED_NOTE}")
    return lines


def _simulated(run: Mapping[str, Any]) -> str:
    return " (simulated)" if run.get("offline") else ""


def last_lines(run: Mapping[str, Any], tz: str = "UTC") -> list[str]:
    """``companyd runs last ROUTINE``: a header (times in ``tz``, the company's zone) and the
    whole answer (or the reason).
    """
    head = (
        f"{run.get('routine')} · {when(run.get('started'), tz)} · {run.get('agent')} · "
        f"{run.get('status')} · {_money(run.get('cost_usd'), _places([run.get('cost_usd')]))}"
        f"{_simulated(run)} · {run.get('run_id')}"
    )
    lines = [head]
    answer = str(run.get("answer") or "").strip()
    if run.get("status") != "ok" and run.get("reason"):
        lines.append(f"why: {run['reason']}")
    if answer:
        lines += ["", answer]
    lines.append("")
    lines.append(f"the whole run: companyd runs show {run.get('run_id')}")
    return lines


def _asker(asked: Mapping[str, Any]) -> str:
    kind, who = asked.get("kind"), asked.get("who")
    if kind == "founder":
        text = "the founder"
    elif kind == "routine":
        text = f"routine {who}"
    elif kind == "colleague":
        text = f"colleague {who}"
    else:
        text = str(asked.get("source") or "unknown")
    if asked.get("run_id"):
        text += f" (run {asked['run_id']})"
    return text


def _link(run: Mapping[str, Any] | None) -> str:
    if not run:
        return "-"
    agent = f"{run.get('agent')}'s " if run.get("agent") else ""
    return f"{agent}run {run.get('run_id')} ({run.get('status')})"


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return cut(" ".join(text.split()), SHOWN_CHARS)


def _tokens(step: Mapping[str, Any]) -> str:
    return (
        f"in {int(step.get('input_tokens') or 0):,} · out {int(step.get('output_tokens') or 0):,}"
        f" · cached {int(step.get('cache_read_tokens') or 0):,} read / "
        f"{int(step.get('cache_write_tokens') or 0):,} written"
    )


def _approval(a: Mapping[str, Any], tz: str) -> str:
    """The founder's decision on a ``require_approval`` call, as one line."""
    decision = str(a.get("decision"))
    asked = f"asked {when(a.get('asked'), tz, seconds=True)}"
    if decision == "expired":
        said = "unanswered: expired (counts as rejected)"
    else:
        said = f"{decision} by {a.get('decided_by') or 'the founder'}"
        said += f" via {a['via']}" if a.get("via") else ""
    said += f" {when(a.get('decided'), tz, seconds=True)}"
    if a.get("reason"):
        said += f": {a['reason']}"
    return f"waited for the founder ({a.get('item_id')}, {asked}) · {said}"


def _decision(d: Mapping[str, Any], tz: str) -> str:
    """The founder's decision on a run's result (``approval: required``) or on a question
    it asked, as one line: what, who, via what, when, the item (and round), the reason,
    the change asked for or the answer.
    """
    decision = str(d.get("decision"))
    question = str(d.get("item_id") or "").startswith("q-")  # an ask_founder question
    tail = f"({d.get('item_id')})" if question else f"({d.get('item_id')}, round {d.get('round')})"
    if decision == "pending":
        waits = "a question awaits an answer" if question else "awaits approval"
        return f"{waits} since {when(d.get('asked'), tz, seconds=True)} {tail}"
    said = decision.replace("changes_requested", "changes requested").replace("_", " ")
    if decision == "expired":
        said = (
            "a question unanswered: expired"
            if question
            else "unanswered: expired (counts as rejected)"
        )
    else:
        said += f" by {d.get('by') or 'the founder'}" + (f" via {d['via']}" if d.get("via") else "")
    said += f" at {when(d.get('decided'), tz, seconds=True)} {tail}"
    return said + (f": {d['text']}" if d.get("text") else "")


def delivery_lines(deliveries: list[Mapping[str, Any]]) -> list[str]:
    """What became of a run's result, one line per delivery, in order. A "queued" line is
    left out once a later line says the same channel delivered it (``--json`` keeps both).
    """
    done_to = {d.get("to") for d in deliveries if d.get("outcome") == "delivered"}
    out = []
    for d in deliveries:
        if d.get("outcome") == "queued" and d.get("to") in done_to:
            continue
        out.append(str(d.get("text") or f"{d.get('outcome')} ({d.get('to')})"))
    return out


def verification_lines(v: Mapping[str, Any] | None) -> list[str]:
    """The ``verification`` block of ``runs show``: each condition met (✓) or unmet (✗),
    with its evidence (the tool call's step) or its reason; nothing if never verified.
    """
    if not v:
        return []
    checks = v.get("checks") or []
    unmet = sum(1 for c in checks if not c.get("met"))
    head = "verified" if not unmet else f"unverified ({unmet} of {len(checks)} unmet)"
    lines = ["", f"verification: {head}"]
    for c in checks:
        mark = "✓" if c.get("met") else "✗"
        step = f" (step {c['step']})" if c.get("step") else ""
        claim = " [claim check]" if c.get("source") == "claim_check" else ""
        lines.append(f"  {mark} {c.get('condition')}{claim}: {c.get('evidence')}{step}")
    return lines


def transcript_lines(t: Mapping[str, Any], tz: str = "UTC") -> list[str]:
    """``companyd runs show RUN_ID``, its times in ``tz`` (the company's zone)."""
    head = f"run {t.get('run_id')} · {t.get('agent')} · {t.get('status')}"
    if int(t.get("attempt") or 1) > 1:
        head += f" · attempt {t.get('attempt')}"
    if t.get("offline"):
        head += " · OFFLINE model"
    lines = [head]
    if t.get("reason"):
        lines.append(f"why:      {t['reason']}")
    lines.append(f"asked by: {_asker(t.get('asked_by') or {})}")
    took = (t.get("totals") or {}).get("duration_s")
    lines.append(
        f"started:  {when(t.get('started'), tz, seconds=True)}"
        + (
            f" · took {took:.1f} s"
            if isinstance(took, int | float)
            else " · not ended"
            if t.get("status") == "interrupted"  # read with no daemon: nothing runs it
            else " · still running"
        )
    )
    thread = t.get("thread") or {}
    if thread.get("reply_to"):
        lines.append(f"follows:  {_link(thread['reply_to'])}")
    for reply in thread.get("replies") or []:
        lines.append(f"followed: {_link(reply)}")
    for d in t.get("decisions") or []:
        lines.append(f"founder:  {_decision(d, tz)}")
    for other in t.get("other_attempts") or []:
        lines.append(
            f"attempt {other.get('attempt')}: run {other.get('run_id')} ({other.get('status')})"
        )
    task = t.get("task") or {}
    lines += ["", "task:"]
    lines += [f"  {line}".rstrip() for line in str(task.get("prompt") or "").splitlines()]
    if task.get("expected_output"):
        lines.append(f"  expected output: {task['expected_output']}")
    if task.get("reviewer"):
        lines.append(f"  reviewer: {task['reviewer']}")
    lines += ["", "steps:"]
    steps = t.get("steps") or []
    totals = t.get("totals") or {}
    # one precision for every amount of the transcript: its steps and its total
    money = _places([*(s.get("cost_usd") for s in steps), totals.get("cost_usd")])
    if not steps:
        lines.append("  (none journaled)")
    for n, step in enumerate(steps, 1):
        kind = step.get("kind")
        if kind == "model":
            lines.append(
                f"  {n:>2}. model {step.get('model')} · {_tokens(step)} · "
                f"{_money(step.get('cost_usd'), money)} · {step.get('stop_reason') or '?'}"
            )
            if step.get("text"):
                lines.append(f"      {_value(step['text'])}")
        elif kind == "tool":
            lines.append(f"  {n:>2}. tool {step.get('name')} {_value(step.get('input') or {})}")
            if step.get("approval"):
                lines.append(f"      {_approval(step['approval'], tz)}")
            if step.get("finished") is None:
                lines.append("      → (no result journaled)")
            else:
                mark = "error: " if step.get("is_error") else ""
                lines.append(f"      → {mark}{_value(step.get('result') or '')}")
            if step.get("colleague_run"):
                lines.append(
                    f"      {step['colleague_run'].get('kind')}: {_link(step['colleague_run'])}"
                )
        elif kind == "review":
            verdict = "approved" if step.get("approved") else f"rejected: {step.get('verdict')}"
            link = f" (run {step['run_id']})" if step.get("run_id") else ""
            lines.append(f"  {n:>2}. review by {step.get('reviewer')}: {verdict}{link}")
        elif kind == "verification":
            said = "holds" if step.get("met") else f"does not hold: {step.get('reason')}"
            lines.append(f"  {n:>2}. verification of the answer: {said}")
            if step.get("follow_up"):
                lines.append("      → follow-up sent to the agent (one more chance in this run)")
    lines += verification_lines(t.get("verification"))
    lines += ["", "answer:"]
    answer = str(t.get("answer") or "").strip()
    lines += [f"  {line}".rstrip() for line in answer.splitlines()] if answer else ["  (none)"]
    shown = delivery_lines(t.get("deliveries") or [])
    if shown:
        lines += ["", "delivered:"] + [f"  {line}" for line in shown]
    models = ", ".join(str(m) for m in dict.fromkeys(totals.get("models") or [])) or "no model"
    calls = int(totals.get("tool_calls") or 0)
    lines += [
        "",
        f"totals:   {int(totals.get('steps') or 0)} model call(s) · {calls} tool call(s) · "
        f"{_tokens(totals)} · {_money(totals.get('cost_usd'), money)}{_simulated(t)} · "
        f"{models}",
    ]
    return lines
