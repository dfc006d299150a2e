"""Tasks sent to agents, and the outcome of running one.

A :class:`Task` is the unit of work in an agent's mailbox: from a routine, a colleague
(delegation), or the operator (``companyd ask``, Telegram ``/ask``). Running it produces one
:class:`RunOutcome`, whose ``status`` is what routine history, alerts and ``companyd runs``
report.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from companyd.admin import JournaledTask

from companyd._frozen import Frozen

__all__ = ["RunOutcome", "RunStatus", "Task", "follow_up_prompt", "new_id"]


#: A run's verification outcome (:attr:`RunOutcome.verification`).
Verification = Literal["verified", "unverified", "none"]


def new_id(prefix: str) -> str:
    """A short unique id such as ``run-3f9c2a1b7d4e``."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class RunStatus(StrEnum):
    """How a run ended."""

    OK = "ok"
    FAILED = "failed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    CIRCUIT_BREAKER = "circuit_breaker"
    QUARANTINED = "quarantined"
    CANCELLED = "cancelled"
    #: the model ended its turn, but its answer did not hold against the run's own record
    #: (``done_when``, the claim check): docs/agents.md, "Verification"
    UNVERIFIED = "unverified"


class Task(Frozen):
    """Work for one agent.

    Attributes:
        id: stable id; a task keeps it across retries, crashes and restarts.
        agent: the assignee's slug.
        prompt: what to do.
        source: who asked: ``"routine:<slug>"``, ``"operator"``, ``"agent:<slug>"``.
        routine: the routine slug when a routine fired it.
        expected_output: what a good result looks like (reviewers check against it).
        reviewer: agent slug that checks the result, if any.
        created: wall-clock time it was created.
        consult_chain: agents already waiting on this one (cycle and depth checks).
        reply_to: the run this task follows up (an answer back to its result): the runs
            form a thread (``companyd runs show``).
        asked_by: the run that asked for this task (a consultation, delegation or review).
        asked_in: the tool call of ``asked_by`` that asked (None for a review).
        done_when: the routine's ``done_when`` conditions, as plain data: what the run must
            show before it counts as done (docs/agents.md, "Verification").
        on_unmet: ``retry`` (one follow-up in the same run) or ``report``.
    """

    id: str
    agent: str
    prompt: str
    source: str
    created: float
    routine: str | None = None
    expected_output: str | None = None
    reviewer: str | None = None
    consult_chain: tuple[str, ...] = ()
    reply_to: str | None = None
    asked_by: str | None = None
    asked_in: str | None = None
    done_when: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)  # keeps it hashable
    on_unmet: str = "retry"

    def to_dict(self) -> JournaledTask:
        """The task as a JSON-serialisable dict (the run journal's form); :meth:`from_dict` reads
        it back.
        """
        d: JournaledTask = {
            "id": self.id,
            "agent": self.agent,
            "prompt": self.prompt,
            "source": self.source,
            "created": self.created,
            "routine": self.routine,
            "expected_output": self.expected_output,
            "reviewer": self.reviewer,
            "consult_chain": list(self.consult_chain),
            "reply_to": self.reply_to,
            "asked_by": self.asked_by,
            "asked_in": self.asked_in,
        }
        if self.done_when:  # only then: older readers see the shape they know
            d["done_when"] = [dict(c) for c in self.done_when]
            d["on_unmet"] = self.on_unmet
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        """The task :meth:`to_dict` wrote; the keys of optional fields may be missing."""
        return cls(
            id=d["id"],
            agent=d["agent"],
            prompt=d["prompt"],
            source=d["source"],
            created=float(d["created"]),
            routine=d.get("routine"),
            expected_output=d.get("expected_output"),
            reviewer=d.get("reviewer"),
            consult_chain=tuple(d.get("consult_chain", ())),
            reply_to=d.get("reply_to"),
            asked_by=d.get("asked_by"),
            asked_in=d.get("asked_in"),
            done_when=tuple(d.get("done_when") or ()),
            on_unmet=str(d.get("on_unmet") or "retry"),
        )


def follow_up_prompt(run_id: str, task: str, answer: str, reply: str) -> str:
    """The prompt of a follow-up in run ``run_id``'s thread: the agent sees the task it was
    given, the result it gave and the founder's reply (an earlier follow-up's task already
    holds the turns before it, so a long thread reads in order).
    """
    return (
        f"This continues your earlier run {run_id}.\n\n"
        f"The task you were given:\n{task.strip()}\n\n"
        f"Your result:\n{answer.strip() or '(no answer)'}\n\n"
        f"The founder replies:\n{reply.strip()}\n\n"
        "Answer the reply; if it asks for a new version, give the whole new version."
    )


class RunOutcome(Frozen):
    """The result of running one task once.

    Attributes:
        status: how it ended.
        reason: why, for anything but ``ok`` (e.g. ``"max_steps 20 reached"``).
        answer: the agent's final text (may be empty on failure).
        cost_usd: settled spend of the run.
        steps: completed model calls.
        models: the models that served the run's calls, in order of first use.
        verification: the verification outcome (docs/agents.md, "Verification"):
            ``verified`` (the answer was checked against the run's record and held),
            ``unverified`` (it did not hold: the status says so too) or ``none`` (nothing
            was checked: no ``done_when``, and the answer claimed nothing).
    """

    task_id: str
    run_id: str
    agent: str
    status: RunStatus
    started: float
    ended: float
    reason: str | None = None
    answer: str = ""
    cost_usd: float = 0.0
    steps: int = 0
    tokens: int = 0
    models: tuple[str, ...] = field(default=())
    offline: bool = False
    verification: Verification = "none"

    @property
    def ok(self) -> bool:
        """Whether the run ended ``ok``."""
        return self.status is RunStatus.OK

    def to_dict(self) -> dict[str, Any]:
        """The outcome as a JSON-serialisable dict (``status`` as its string value)."""
        return {
            "task_id": self.task_id,
            "run_id": self.run_id,
            "agent": self.agent,
            "status": str(self.status),
            "reason": self.reason,
            "answer": self.answer,
            "cost_usd": self.cost_usd,
            "steps": self.steps,
            "tokens": self.tokens,
            "models": list(self.models),
            "started": self.started,
            "ended": self.ended,
            "offline": self.offline,
        }
