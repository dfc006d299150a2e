"""A run's transcript: what was asked, each step, each tool call, the verdict, the answer.

:func:`read_transcript` builds it from the run journal's tables (on the journal's thread:
the :class:`~companyd.runs._journal.Journal` hands it its connection, SQLite's or
PostgreSQL's — the SQL here reads the same on both) as one JSON-ready dict —
what ``companyd runs show`` prints and the ``run_show`` operation answers:

* **who asked**: a routine, the founder, or a colleague (with a link to the asking run);
* **the task**: the prompt, the expected output, the reviewer;
* **steps**, in order: each model call (model, tokens in / out / cached, cost, stop
  reason, its text) and each tool call (name, input, result, error or not) — a
  consultation or delegation links to the colleague's run — the reviewer's verdict, and
  each check of a final answer against the run's record (``verification``);
* **verification**: the last of those checks — each condition met or unmet, with its
  evidence (the tool call's step) or its reason (companyd.agents._verification);
* **the thread**: the run this one follows up (``reply_to``) and the runs that follow it up;
* the final **answer** and the **totals**;
* its result's **deliveries** (``delivery`` steps the pager adds after the run ended: to
  Telegram with the message id, to a file with its path, or not delivered and why, kept in
  the founder's inbox).

It also bounds what a finished run keeps (:func:`bound_payload`): every string of a
finished run's steps longer than :data:`STORED_VALUE_CHARS` is cut to that length and ends
with a note of its full size (docs/agents.md, "The transcript"). :func:`cut` makes the
shorter cuts of the text view the same way, and never loses the size a stored cut noted.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:  # typed dicts of the operator contract (pydantic): not for reading a run
    from companyd.admin import (
        AskedBy,
        ColleagueRun,
        OtherAttempt,
        ResultDelivery,
        ReviewStep,
        RunTotals,
        Step,
        TaskAsked,
        Thread,
        ThreadRun,
        Tokens,
        ToolStep,
        VerificationCheck,
        VerificationStep,
    )

from companyd.runs._cut import cut, full_size
from companyd.storage import Connection

__all__ = [
    "STORED_RUN_BYTES",
    "STORED_VALUE_CHARS",
    "asked_by",
    "bound_payload",
    "cut",
    "delivery_step",
    "full_size",
    "read_transcript",
]

#: Longest string a finished run's journaled steps keep (a tool result, a tool input value,
#: a model's text); longer ones are cut to it, noting the full size.
STORED_VALUE_CHARS = 8_000
#: A finished run's steps above this many bytes in all are cut harder, to
#: :data:`_TIGHT_VALUE_CHARS` per string.
STORED_RUN_BYTES = 1 << 20
_TIGHT_VALUE_CHARS = 500

_TOKEN_KEYS: tuple[
    Literal["input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"], ...
] = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _cut_all(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, list):
        return [_cut_all(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _cut_all(v, limit) for k, v in value.items()}
    return value


def bound_payload(payload: str, limit: int = STORED_VALUE_CHARS) -> str | None:
    """A step's JSON with every string over ``limit`` characters cut, or None when nothing
    needed cutting.
    """
    data = json.loads(payload)
    bounded = _cut_all(data, limit)
    if bounded == data:
        return None
    return json.dumps(bounded, ensure_ascii=False)


def bound_run(db: Connection, run_id: str) -> None:
    """Bound the journaled steps of a finished run (inside the caller's transaction)."""
    limit = STORED_VALUE_CHARS
    total = db.execute(
        "SELECT COALESCE(SUM(length(payload)), 0) FROM steps WHERE run_id = ?", (run_id,)
    ).fetchone()[0]
    if total > STORED_RUN_BYTES:
        limit = _TIGHT_VALUE_CHARS
    rows = db.execute(
        "SELECT seq, payload FROM steps WHERE run_id = ? AND length(payload) > ?",
        (run_id, limit),
    ).fetchall()
    for seq, payload in rows:
        bounded = bound_payload(payload, limit)
        if bounded is not None:
            db.execute(
                "UPDATE steps SET payload = ? WHERE run_id = ? AND seq = ?",
                (bounded, run_id, seq),
            )


def asked_by(source: str, asking_run: str | None) -> AskedBy:
    """Who asked for a task, from its ``source``: a routine, the founder, or a colleague."""
    kind, _, who = source.partition(":")
    if source == "operator":
        return {"kind": "founder", "who": "the founder", "run_id": None, "source": source}
    if kind == "routine":
        return {"kind": "routine", "who": who, "run_id": None, "source": source}
    if kind == "agent":
        return {"kind": "colleague", "who": who, "run_id": asking_run, "source": source}
    return {"kind": kind or source, "who": who or source, "run_id": asking_run, "source": source}


_RUN_COLUMNS = (
    "r.id, r.task_id, r.agent, r.routine, r.attempt, r.state, r.reason, r.answer, r.started, "
    "r.ended, r.cost, r.steps, r.models, r.offline, r.reply_to, r.asked_by, t.payload"
)


def read_transcript(db: Connection, run_id: str) -> dict[str, Any] | None:
    """The transcript of run ``run_id`` (None if the journal has no such run)."""
    row = db.execute(
        f"SELECT {_RUN_COLUMNS} FROM runs r LEFT JOIN tasks t ON t.id = r.task_id WHERE r.id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    (
        rid,
        task_id,
        agent,
        routine,
        attempt,
        state,
        reason,
        answer,
        started,
        ended,
        cost,
        nsteps,
        models,
        offline,
        reply_to,
        asker,
        payload,
    ) = row
    task = json.loads(payload) if payload else {}
    colleagues = _colleague_runs(db, rid)
    steps, review, tokens, tool_calls = _steps(db, rid, colleagues)
    verification = _verification(steps)
    totals: RunTotals = {
        **tokens,
        "tool_calls": tool_calls,
        "cost_usd": float(cost),
        "steps": int(nsteps),
        "models": json.loads(models),
        "duration_s": (float(ended) - float(started)) if ended is not None else None,
    }
    replies: list[ThreadRun] = [
        {"run_id": r[0], "agent": r[1], "status": r[2], "started": r[3]}
        for r in db.execute(
            "SELECT id, agent, state, started FROM runs WHERE reply_to = ? ORDER BY started",
            (rid,),
        )
    ]
    previous: ThreadRun | None = None
    if reply_to:
        got = db.execute(
            "SELECT id, agent, state, started FROM runs WHERE id = ?", (reply_to,)
        ).fetchone()
        previous = (
            {"run_id": got[0], "agent": got[1], "status": got[2], "started": got[3]}
            if got
            else {"run_id": reply_to, "agent": None, "status": "pruned", "started": None}
        )
    attempts: list[OtherAttempt] = [
        {"run_id": r[0], "attempt": r[1], "status": r[2]}
        for r in db.execute(
            "SELECT id, attempt, state FROM runs WHERE task_id = ? AND id != ? ORDER BY started",
            (task_id, rid),
        )
    ]
    asked: TaskAsked = {
        "prompt": task.get("prompt", ""),
        "expected_output": task.get("expected_output"),
        "reviewer": task.get("reviewer"),
        "created": task.get("created"),
    }
    thread: Thread = {"reply_to": previous, "replies": replies}
    deliveries: list[ResultDelivery] = [
        delivery_step(json.loads(p), float(ts))
        for p, ts in db.execute(
            "SELECT payload, ts FROM steps WHERE run_id = ? AND kind = 'delivery' ORDER BY seq",
            (rid,),
        )
    ]
    return {
        "run_id": rid,
        "task_id": task_id,
        "agent": agent,
        "routine": routine,
        "attempt": int(attempt),
        "status": state,
        "reason": reason,
        "started": started,
        "ended": ended,
        "offline": bool(offline),
        "asked_by": asked_by(str(task.get("source") or "unknown"), asker),
        "task": asked,
        "thread": thread,
        "other_attempts": attempts,
        "steps": steps,
        "consultations": [c for c in colleagues.values() if c["kind"] != "review"],
        "review": review,
        "verification": verification,
        "answer": answer,
        "totals": totals,
        "deliveries": deliveries,
    }


def delivery_step(p: dict[str, Any], ts: float) -> ResultDelivery:
    """A ``delivery`` step as the transcript shows it (a missing key: None)."""
    mid = p.get("message_id")
    return {
        "to": str(p.get("to") or ""),
        "outcome": str(p.get("outcome") or ""),
        "at": ts,
        "where": p.get("where"),
        "message_id": int(mid) if isinstance(mid, int) else None,
        "reason": p.get("reason"),
        "kept": p.get("kept"),
        "text": str(p.get("text") or ""),
    }


def _colleague_runs(db: Connection, run_id: str) -> dict[str, ColleagueRun]:
    """The latest run of each task this run asked for, by the tool call that asked (a
    review, asked by no tool call, under ``"review"``).
    """
    out: dict[str, ColleagueRun] = {}
    for rid, task_id, agent, state, reason, asked_in in db.execute(
        "SELECT id, task_id, agent, state, reason, asked_in FROM runs WHERE asked_by = ? "
        "ORDER BY started, rowid",
        (run_id,),
    ):
        kind = task_id.partition("-")[0]
        key = asked_in or ("review" if kind == "review" else task_id)
        out[key] = {
            "run_id": rid,
            "agent": agent,
            "status": state,
            "reason": reason,
            "kind": {"consult": "consult", "review": "review"}.get(kind, "delegate"),
            "tool_use_id": asked_in,
        }
    return out


def _steps(
    db: Connection, run_id: str, colleagues: dict[str, ColleagueRun]
) -> tuple[list[Step], ReviewStep | None, Tokens, int]:
    """The steps of ``run_id`` in order, its review, and its token and tool call totals."""
    steps: list[Step] = []
    tools: dict[str, ToolStep] = {}
    review: ReviewStep | None = None
    tokens: Tokens = {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    tool_calls = 0
    for seq, kind, key, payload, ts in db.execute(
        "SELECT seq, kind, key, payload, ts FROM steps WHERE run_id = ? ORDER BY seq", (run_id,)
    ):
        p = json.loads(payload)
        if kind == "llm":
            usage = p.get("usage") or {}
            step_tokens: Tokens = {
                "input_tokens": int(usage.get("input_tokens", 0)),
                "output_tokens": int(usage.get("output_tokens", 0)),
                "cache_read_tokens": int(usage.get("cache_read_tokens", 0)),
                "cache_write_tokens": int(usage.get("cache_write_5m_tokens", 0))
                + int(usage.get("cache_write_1h_tokens", 0)),
            }
            for k in _TOKEN_KEYS:
                tokens[k] += step_tokens[k]
            content = p.get("content") or []
            steps.append(
                {
                    "seq": seq,
                    "kind": "model",
                    "ts": ts,
                    "model": p.get("model"),
                    **step_tokens,
                    "cost_usd": float(Decimal(str(p.get("cost", "0")))),
                    "stop_reason": p.get("stop_reason"),
                    "offline": bool(p.get("offline")),
                    "text": "".join(
                        str(b.get("text", "")) for b in content if b.get("type") == "text"
                    ),
                    "tool_calls": [
                        str(b.get("id")) for b in content if b.get("type") == "tool_use"
                    ],
                }
            )
        elif kind in ("tool_start", "tool_result", "approval"):
            call = tools.get(str(key))
            if call is None:
                call = {
                    "seq": seq,
                    "kind": "tool",
                    "ts": ts,
                    "tool_use_id": key,
                    "name": None,
                    "input": None,
                    "result": None,
                    "is_error": None,
                    "finished": None,
                    "colleague_run": None,
                    "approval": None,
                }
                tools[str(key)] = call
                steps.append(call)
                tool_calls += 1
            if kind == "tool_start":
                call["name"] = p.get("name")
                call["input"] = p.get("input")
                link = colleagues.get(str(key))
                if link is not None:
                    call["colleague_run"] = link
            elif kind == "approval":
                # a refused call has no tool_start: its name and input come from here
                call["name"] = call["name"] or p.get("name")
                if call["input"] is None:
                    call["input"] = p.get("input")
                call["approval"] = {
                    "item_id": p.get("item"),
                    "decision": p.get("state"),
                    "decided_by": p.get("decided_by") or None,
                    "via": p.get("via") or None,
                    "asked": p.get("asked"),
                    "decided": p.get("decided"),
                    "reason": p.get("text") or "",
                }
            else:
                call["result"] = _result_text(p.get("content"))
                call["is_error"] = bool(p.get("is_error"))
                call["finished"] = ts
        elif kind == "review":
            link = colleagues.get("review")
            review = {
                "seq": seq,
                "kind": "review",
                "ts": ts,
                "reviewer": p.get("reviewer"),
                "approved": bool(p.get("approved")),
                "verdict": p.get("verdict") or "",
                "run_id": link["run_id"] if link else None,
            }
            steps.append(review)
        elif kind == "verification":
            verified: VerificationStep = {
                "seq": seq,
                "kind": "verification",
                "ts": ts,
                "attempt": int(p.get("attempt") or 1),
                "met": bool(p.get("met")),
                "reason": str(p.get("reason") or ""),
                "checks": list(p.get("checks") or []),
                "follow_up": p.get("follow_up"),
            }
            steps.append(verified)
    return steps, review, tokens, tool_calls


def _verification(steps: list[Step]) -> VerificationStep | None:
    """The run's last verification (its verdict), each check's evidence given the
    transcript's number of its tool call (``step``); None if the run was never verified.
    """
    numbers: dict[str | None, int] = {}
    last: VerificationStep | None = None
    for n, s in enumerate(steps, 1):
        if s["kind"] == "tool":
            numbers[s["tool_use_id"]] = n
        elif s["kind"] == "verification":
            last = s
    if last is None:
        return None
    checks: list[VerificationCheck] = []
    for c in last["checks"]:
        checked = cast("VerificationCheck", dict(c))
        checked["step"] = numbers.get(c.get("tool_use_id"))
        checks.append(checked)
    shown = cast("VerificationStep", dict(last))
    shown["checks"] = checks
    return shown


def _result_text(content: Any) -> str:
    """A tool result's content as text (a string, or the text of its blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    return "" if content is None else json.dumps(content, ensure_ascii=False)
