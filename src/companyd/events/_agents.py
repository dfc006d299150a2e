"""Event kinds of the role agents (:mod:`companyd.agents`, source ``agent/<slug>``; proposals:
``improver``).
"""

from __future__ import annotations

from companyd.events._base import Event, Severity, optional

__all__ = [
    "AgentPaused",
    "AgentResumed",
    "CircuitBreaker",
    "FounderApprovalRequested",
    "FounderDecided",
    "FounderQuestion",
    "FounderReminder",
    "FounderResultForApproval",
    "ModelFallback",
    "ProposalApplied",
    "ProposalCreated",
    "QuotaWall",
    "QuotaWallLifted",
    "RunFailed",
    "RunFinished",
    "RunStarted",
    "TaskQuarantined",
]


class RunStarted(Event):
    """An agent started a run (``resumed_at_step``: a run resumed from its journal)."""

    KIND = "run_started"
    severity: Severity = Severity.DEBUG
    agent: str
    task_id: str
    run_id: str
    routine: str | None
    resumed_at_step: int | None = optional()


class RunFinished(Event):
    """A run ended ok — or ``unverified`` (``status``): its model ended its turn, but the
    answer did not hold against the run's record; ``reason`` says why.
    """

    KIND = "run_finished"
    status: str
    agent: str
    task_id: str
    run_id: str
    routine: str | None
    cost_usd: float
    steps: int
    models: list[str]
    offline: bool
    reason: str | None = optional()


class RunFailed(Event):
    """A run ended otherwise than ok; ``reason`` says why."""

    KIND = "run_failed"
    severity: Severity = Severity.WARNING
    status: str
    reason: str | None
    agent: str
    task_id: str
    run_id: str
    routine: str | None
    cost_usd: float
    steps: int
    models: list[str]
    offline: bool


class CircuitBreaker(Event):
    """A breaker stopped a run: ``limit`` names which, ``reason`` has the numbers."""

    KIND = "circuit_breaker"
    severity: Severity = Severity.WARNING
    agent: str
    task_id: str
    run_id: str
    routine: str | None
    limit: str
    reason: str


class TaskQuarantined(Event):
    """A task crashed its runs ``crashes`` times and is set aside."""

    KIND = "task_quarantined"
    severity: Severity = Severity.WARNING
    agent: str
    task_id: str
    run_id: str
    routine: str | None
    crashes: int
    errors: list[str]
    prompt: str


class AgentPaused(Event):
    """An agent was paused (``budget``: by its budget)."""

    KIND = "agent_paused"
    agent: str
    reason: str
    budget: bool


class AgentResumed(Event):
    """An agent runs again."""

    KIND = "agent_resumed"
    agent: str
    reason: str


class ModelFallback(Event):
    """A model call fell back from ``from_model`` to ``to_model``."""

    KIND = "model_fallback"
    agent: str
    run_id: str
    from_model: str
    to_model: str
    reason: str


class ProposalCreated(Event):
    """The improver proposes a change (``diff``: at most 1,500 characters)."""

    KIND = "proposal_created"
    proposal_id: str
    agent: str
    proposer: str
    reason: str
    diff: str


class ProposalApplied(Event):
    """An approved proposal was applied."""

    KIND = "proposal_applied"
    proposal_id: str
    agent: str


class FounderApprovalRequested(Event):
    """A ``require_approval`` tool call waits for the founder (docs/desk.md): ``input`` is
    the arguments as JSON (at most 1,500 characters), ``reason`` the agent's text before
    the call (at most 800), ``deadline`` when no answer counts as a rejection.
    """

    KIND = "founder_approval_requested"
    item_id: str
    agent: str
    run_id: str | None
    routine: str | None
    deadline: float
    tool: str
    input: str
    reason: str


class FounderQuestion(Event):
    """An agent asks the founder (``ask_founder``); the run waits until ``deadline``."""

    KIND = "founder_question"
    item_id: str
    agent: str
    run_id: str | None
    routine: str | None
    deadline: float
    question: str


class FounderResultForApproval(Event):
    """A routine's result (``approval: required``) waits for the founder: ``answer`` at
    most 3,000 characters, ``round`` 1 and then 2… after each change request (``follows``:
    the item of the round sent back).
    """

    KIND = "founder_result_for_approval"
    item_id: str
    agent: str
    run_id: str | None
    routine: str | None
    deadline: float
    task: str
    answer: str
    cost_usd: float
    round: int
    follows: str | None = optional()
    #: the run ended ``unverified``: why (shown before the founder decides)
    unverified: str | None = optional()
    #: the run was on the offline model: its cost is simulated (the message says so)
    offline: bool | None = optional()


class FounderDecided(Event):
    """An item on the founder's desk was decided (``state``: approved, rejected, answered,
    changes_requested, expired, withdrawn — closed because the run that asked ended
    without it): ``by`` whom, ``via`` what (``telegram``, ``cli``; empty when it expired;
    ``companyd`` when withdrawn).
    """

    KIND = "founder_decided"
    item_id: str
    item_kind: str
    agent: str
    run_id: str | None
    state: str
    by: str
    via: str = ""
    routine: str | None = optional()


class QuotaWall(Event):
    """The API's rate limit holds back every model of these ``agents``' chains (``models``)
    for longer than ``anthropic.quota_pause_after``: they are paused until ``until`` (epoch;
    ``until_text``: ``HH:MM`` in the company's time zone) and resume by themselves then.
    ``message`` is what the API said.
    """

    KIND = "quota_wall"
    severity: Severity = Severity.WARNING
    agents: list[str]
    models: list[str]
    until: float
    until_text: str
    message: str


class QuotaWallLifted(Event):
    """The quota wall's time came: ``agents`` paused by it run again."""

    KIND = "quota_wall_lifted"
    severity: Severity = Severity.WARNING
    agents: list[str]
    until_text: str


class FounderReminder(Event):
    """Three quarters of a pending item's time (``approval_timeout``) have passed: the
    founder is reminded of it, once. ``deadline``: when it expires — which denies it.
    """

    KIND = "founder_reminder"
    severity: Severity = Severity.WARNING
    item_id: str
    item_kind: str
    agent: str
    run_id: str | None
    created: float
    deadline: float
    summary: str
    routine: str | None = optional()
