"""The run journal's records: a task's states, what each kind of step holds, a journaled
step and an unfinished run as :class:`companyd.runs._journal.Journal` hands them back
(re-exported there). Plain data: no storage here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, cast

from companyd._frozen import Frozen
from companyd.llm import ContentBlock, ToolResultBlock
from companyd.runs._tasks import Task

__all__ = [
    "ApprovalStep",
    "JournaledRun",
    "LlmStep",
    "ReviewStep",
    "Step",
    "StepPayload",
    "TaskState",
    "ToolStartStep",
    "VerificationPayload",
]


class TaskState:
    """The states of a journaled task (the ``tasks.state`` column): queued, running, done, or
    quarantined (crashed too often; waits for ``companyd retry``).
    """

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    QUARANTINED = "quarantined"


class LlmStep(TypedDict):
    """The payload of an ``llm`` step: one model response (its content blocks verbatim) and
    what it cost.
    """

    model: str
    content: list[ContentBlock]
    #: absent from steps journaled before it was recorded
    stop_reason: NotRequired[str]
    usage: dict[str, int]
    cost: str
    offline: bool
    request_id: str | None


class ToolStartStep(TypedDict):
    """The payload of a ``tool_start`` step: the call about to run."""

    name: str
    input: dict[str, Any]


class ReviewStep(TypedDict):
    """The payload of a ``review`` step: the reviewer's verdict on the run's answer."""

    reviewer: str
    approved: bool
    #: why it was rejected ("" when approved)
    verdict: str


class ApprovalStep(TypedDict):
    """The payload of an ``approval`` step: the founder's decision on a ``require_approval``
    tool call (journaled once decided, before the call runs or is refused).
    """

    name: str
    input: dict[str, Any]
    #: the desk item's id (``ap-…``)
    item: str
    #: approved | rejected | expired
    state: str
    asked: float
    decided: float | None
    decided_by: str
    #: through what: telegram | cli ("" before it was kept)
    via: NotRequired[str]
    #: the rejection's reason ("" when approved)
    text: str


class VerificationPayload(TypedDict):
    """The payload of a ``verification`` step: a final answer checked against the run's
    record (companyd.agents._verification) — each check, whether all held, why not, and the
    follow-up sent to the agent (None: the run ended with this verdict; a resumed run
    replays a follow-up as its next user turn).
    """

    attempt: int
    met: bool
    reason: str
    checks: list[dict[str, Any]]
    follow_up: str | None


#: What a step journals: ``llm``, ``tool_start``, ``tool_result`` (the block itself),
#: ``approval``, ``review`` or ``verification``.
StepPayload = (
    LlmStep | ToolStartStep | ToolResultBlock | ApprovalStep | ReviewStep | VerificationPayload
)


class Step(Frozen):
    """One journaled step of a run (``payload`` is its JSON, parsed)."""

    seq: int
    kind: str
    key: str | None
    payload: dict[str, Any]
    ts: float

    def llm(self) -> LlmStep:
        """The payload of an ``llm`` step."""
        return cast(LlmStep, self.payload)

    def tool_result(self) -> ToolResultBlock:
        """The payload of a ``tool_result`` step."""
        return cast(ToolResultBlock, self.payload)


@dataclass(kw_only=True)
class JournaledRun:
    """An unfinished run as the journal holds it, ready to be resumed."""

    task: Task
    run_id: str
    attempt: int
    started: float
    crashes: int
    errors: list[str]
    steps: list[Step] = field(default_factory=list)
