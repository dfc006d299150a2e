"""The results of the operator operations: one frozen dataclass per :class:`Admin` result.

A result is what the daemon answers, as data: the control socket turns it into JSON in one
place (:mod:`companyd.admin._wire`), the field order being the order of the JSON keys, so
``companyd … --json`` prints exactly these fields (docs/daemon.md documents each shape).
Front ends that decide something from a result read its attributes; renderers show its
JSON form (:func:`companyd.admin._wire.result_data`), the same data the CLI receives.

Two conventions keep the JSON exactly what operators and scripts already read:

- a key that is present only sometimes is a field marked :data:`Omitted` (left out of the
  JSON when it is None);
- a block another part of the daemon builds (journal rows, a transcript's blocks, the
  spend book's reports, the scheduler's routines and fires, proposals, the runs in flight,
  the pager's health, status's ``reload`` and ``loop_lag``) is a ``TypedDict`` of
  :mod:`companyd.admin._blocks`, marked :data:`~companyd.admin._blocks.AsBuilt`: mypy checks
  its keys, and the JSON is the dict as built. The blocks that stay plain JSON
  (``dict[str, Any]``: the supervision tree, a reload's routine moves, a desk item's
  details, a backup's manifest members) are listed, with why, in that module's docstring.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Any, TypeVar

from pydantic import Field

from companyd._frozen import Frozen
from companyd.admin._blocks import (
    AsBuilt,
    AskedBy,
    BudgetRow,
    ColleagueRun,
    FireRow,
    LeaderBlock,
    LoopLagBlock,
    OtherAttempt,
    PagerHealth,
    ProposalRow,
    ReloadBlock,
    ResultDecision,
    ResultDelivery,
    ReviewStep,
    RoutineRow,
    RunInFlightRow,
    RunRow,
    RunTotals,
    SpendPeriod,
    SpendTotals,
    Step,
    TaskAsked,
    TaskRow,
    Thread,
    VerificationStep,
)

__all__ = [
    "AgentCounts",
    "AskAnswer",
    "BackupWritten",
    "BudgetRaised",
    "BudgetReport",
    "CompanyInfo",
    "ConfigView",
    "DaemonInfo",
    "DashboardLogin",
    "DebugBlocked",
    "DebugCrashed",
    "DepartmentChanges",
    "DeskDecision",
    "Inbox",
    "InboxItem",
    "JobHistory",
    "JobResumed",
    "JobRun",
    "Jobs",
    "MemoryChanges",
    "MemoryEntity",
    "MemorySearch",
    "Omitted",
    "Paused",
    "ProposalDecision",
    "Proposals",
    "ReloadApplied",
    "ReloadRejected",
    "Resumed",
    "ResumedAll",
    "RoutineLine",
    "RunEnded",
    "RunTranscript",
    "Runs",
    "SpendLine",
    "SpendPeriodLine",
    "SpendReport",
    "SpendStatus",
    "Status",
    "TaskRetried",
    "Tasks",
    "ToolsApproved",
    "ToolsReport",
]

T = TypeVar("T")

#: A field whose key is left out of the JSON when its value is None (a key that is present
#: only sometimes, e.g. reload's ``restart_required``).
Omitted = Annotated[T | None, Field(exclude_if=lambda v: v is None)]

JSON = dict[str, Any]


# -- agents ------------------------------------------------------------------------------------


class Paused(Frozen):
    """``pause``: the agent finishes its current run, then starts no new ones."""

    agent: str
    paused: bool
    message: str


class Resumed(Frozen):
    """``resume``: ``resumed`` is False when the agent was not paused (nothing done)."""

    agent: str
    resumed: bool
    message: str


class ResumedAll(Frozen):
    """``resume_all``: the agents that were paused and run again (empty: none was)."""

    resumed: list[str]
    message: str


class RunEnded(Frozen):
    """How a run ended (the run journal's outcome): the fields ``ask`` and ``run_job`` share."""

    task_id: str
    run_id: str
    agent: str
    status: str
    reason: str | None
    answer: str
    cost_usd: float
    steps: int
    tokens: int
    models: list[str]
    started: float
    ended: float
    offline: bool


class AskAnswer(RunEnded):
    """``ask``: how the one-off task's run ended."""


class Runs(Frozen):
    """``runs``: recent runs, newest first (the run journal's rows)."""

    runs: AsBuilt[list[RunRow]]


class RunTranscript(Frozen):
    """``run_show``: one run as the journal holds it (docs/agents.md, "The transcript").

    The blocks are the journal's (:func:`companyd.runs._transcript.read_transcript`): who
    asked, the task, the thread, each of ``steps`` (a model call, a tool call, the review, a
    verification), ``consultations`` (colleagues' runs), ``review``, ``verification`` and
    ``totals``; ``decisions`` are the founder's on the run's result (a routine with
    ``approval: required``): item_id, round, decision (approved, rejected,
    changes_requested, expired), by, via (telegram, cli, dashboard), asked, decided, text.
    ``deliveries`` are its result's, as the pager recorded them
    (:class:`~companyd.admin._blocks.ResultDelivery`).
    """

    run_id: str
    task_id: str
    agent: str
    routine: str | None
    attempt: int
    status: str
    reason: str | None
    started: float
    ended: float | None
    offline: bool
    asked_by: AsBuilt[AskedBy]
    task: AsBuilt[TaskAsked]
    thread: AsBuilt[Thread]
    other_attempts: AsBuilt[list[OtherAttempt]]
    steps: AsBuilt[list[Step]]
    consultations: AsBuilt[list[ColleagueRun]]
    review: AsBuilt[ReviewStep | None]
    answer: str
    totals: AsBuilt[RunTotals]
    decisions: AsBuilt[list[ResultDecision]] = field(default_factory=list)
    #: the last check of the final answer against the run's record (companyd.agents.
    #: _verification): each condition met or unmet with its evidence; None if never checked
    verification: AsBuilt[VerificationStep | None] = None
    deliveries: AsBuilt[list[ResultDelivery]] = field(default_factory=list)


class Tasks(Frozen):
    """``tasks``: tasks waiting, running or quarantined (the run journal's rows)."""

    tasks: AsBuilt[list[TaskRow]]


class TaskRetried(Frozen):
    """``retry``: the quarantined task is queued again."""

    task_id: str
    agent: str
    queued: bool
    message: str


# -- spend -------------------------------------------------------------------------------------


class SpendReport(Frozen):
    """``spend``: settled spend grouped ``by`` over ``period`` (the spend book's report);
    with ``per_day``, one row per day and key, each with its ``day``.
    """

    by: str
    period: AsBuilt[SpendPeriod]
    rows: AsBuilt[list[SpendTotals]]
    total: AsBuilt[SpendTotals]


class BudgetReport(Frozen):
    """``budget``: each budget with its limit, use, reservations and reset (the spend
    book's report rows), and how many calls hold a reservation now.
    """

    timezone: str
    now: str
    day: str
    month: str
    budgets: AsBuilt[list[BudgetRow]]
    in_flight: int


class BudgetRaised(Frozen):
    """``raise_budget``: today's limit after the raise (None: no daily budget) and the
    agents the raise resumed.
    """

    agent: str | None
    raised_usd: float
    daily_limit_usd: float | None
    resumed: list[str]
    message: str


# -- routines ----------------------------------------------------------------------------------


class Jobs(Frozen):
    """``jobs``: each routine as the scheduler reports it (``companyd jobs --json``)."""

    daemon: bool
    generated: str
    routines: AsBuilt[list[RoutineRow]]


class JobHistory(Frozen):
    """``job_history``: the latest fires of one routine, newest first; its agent and
    schedule as the daemon runs it (None: no longer in the company.yaml it runs).
    """

    routine: str
    agent: str | None
    schedule: str | None
    fires: AsBuilt[list[FireRow]]


class _RoutineNamed(Frozen):
    routine: str


class JobResumed(Frozen):
    """``resume_job``: ``resumed`` is False when the routine was not paused (nothing done)."""

    routine: str
    resumed: bool
    message: str


class WebhookFired(Frozen):
    """``fire_webhook``: the fire a webhook started (``replay`` True: the id was seen
    before, nothing new runs and ``fire_id`` is the first fire's).
    """

    routine: str
    fire_id: str
    replay: bool
    message: str


class JobRun(RunEnded, _RoutineNamed):
    """``run_job``: the routine, and how its run ended.

    ``routine`` is the first JSON key: a dataclass lists the fields of its last base first,
    so :class:`_RoutineNamed` comes after :class:`RunEnded` among the bases.

    ``state`` is ``ended`` (the fire is over: ``status`` is its outcome),
    ``awaiting_approval`` (a routine with ``approval: required``: the run ended with the
    result ``answer``, which waits for the founder as desk item ``approval_item``; the
    fire ends when the founder decides) or ``waiting_for_founder`` (the run itself waits
    for the founder — a tool call to approve or a question to answer, desk item
    ``approval_item`` —: ``status`` is ``running``, ``ended`` 0, nothing spent counted
    yet). ``message`` says what happened and, when it waits, where to decide.
    """

    state: str = "ended"
    approval_item: str | None = None
    message: str = ""


# -- proposals ---------------------------------------------------------------------------------


class Proposals(Frozen):
    """``proposals``: the improver's proposals, pending first."""

    proposals: AsBuilt[list[ProposalRow]]


class ProposalDecision(Frozen):
    """``approve``, ``reject``, ``revert``: the proposal after the decision."""

    id: str
    agent: str
    proposer: str
    reason: str
    file: str
    diff: str
    status: str
    created: float
    decided: float | None
    message: str
    #: who decided, through what, and the words with it (a rejection's reason)
    decided_by: str = ""
    via: str = ""
    note: str = ""


# -- the founder's desk ------------------------------------------------------------------------


class DeskDecision(Frozen):
    """``approve``, ``reject``, ``answer`` of a founder's-desk item (``ap-``, ``q-``,
    ``r-``): the item after the decision (``details``: what it asked — tool and arguments,
    question, or result).
    """

    id: str
    kind: str
    agent: str
    run_id: str | None
    routine: str | None
    details: JSON
    state: str
    created: float
    deadline: float
    decided: float | None
    text: str
    decided_by: str
    message: str


class InboxItem(Frozen):
    """One thing waiting for the founder (``actions``: ``approve``, ``reject``,
    ``answer``, ``changes``, ``retry``).
    """

    id: str
    kind: str
    agent: str
    created: float
    summary: str
    actions: list[str]
    deadline: Omitted[float] = None
    run_id: Omitted[str] = None


class Inbox(Frozen):
    """``inbox``: what waits for the founder, oldest first."""

    items: list[InboxItem]


# -- memory ------------------------------------------------------------------------------------


class MemorySearch(Frozen):
    """``memory_search``: entities whose name, type or an observation contains ``query``
    (the MCP ``search_nodes`` match), in file order, at most ``limit`` of them; each is
    ``{name, entityType, observations, relations}`` (the counts) and ``match``, the first
    observation that matched (or the first one). ``total`` counts every match.
    """

    query: str
    total: int
    truncated: bool
    entities: list[JSON]


class MemoryEntity(Frozen):
    """``memory_entity``: one entity, its relations and its neighbourhood
    (``entity_type`` None: the name is only the end of relations, no entity line).

    ``relations`` are the relations with the entity at either end (MCP shape: ``from``,
    ``to``, ``relationType``); ``neighbours`` the entities within ``depth`` hops
    (``{name, entityType, distance}``, nearest first), ``others`` the names within reach
    that are only relation ends, ``edges`` every relation among them, ``truncated`` whether
    the neighbourhood was cut at its size limit.
    """

    name: str
    entity_type: str | None
    observations: list[str]
    relations: list[JSON]
    depth: int
    neighbours: list[JSON]
    others: list[str]
    edges: list[JSON]
    truncated: bool


class MemoryChanges(Frozen):
    """``memory_changes``: the latest writes to memory through the daemon, newest first:
    ``{at, tool, by, entities, summary}`` each (``by``: the agent, or None). Kept in memory
    since ``since`` (the daemon's start), at most the last few hundred.
    """

    since: float
    changes: list[JSON]


# -- the configuration -------------------------------------------------------------------------


class ConfigView(Frozen):
    """``config_view``: the company.yaml the daemon runs, resolved and redacted.

    ``document`` is the resolved file, every section with every effective default filled
    in (:func:`companyd.config.resolved_view`, as ``show-config`` prints it; every string
    through the one redactor); ``secrets`` the secrets it refers to by
    name (``{path, kind, name, is_set}``, never a value); ``file_mtime`` the file's
    modification time now (None: it cannot be read), ``loaded_at`` when the running
    version was read, ``changed_on_disk`` whether the file's text now differs from the
    running version's (a reload would read something else); ``reload``
    the status's reload block and ``reload_errors`` every error of the last rejected reload
    (redacted, one line each).
    """

    path: str
    loaded_at: float
    file_mtime: float | None
    changed_on_disk: bool
    document: JSON
    secrets: list[JSON]
    warnings: list[str]
    reload: AsBuilt[ReloadBlock]
    reload_errors: list[str]
    #: the settings the running file changed that only a restart applies (the daemon runs
    #: the values it started with); absent when none
    restart_required: Omitted[list[str]] = None


# -- the daemon --------------------------------------------------------------------------------


class DaemonInfo(Frozen):
    """The ``daemon`` block of status."""

    pid: int
    version: str
    state: str
    started_at: float
    uptime_s: float
    config: str
    config_loaded_at: float
    reload: AsBuilt[ReloadBlock]
    state_dir: str
    socket: str
    offline: bool
    loop_lag: AsBuilt[LoopLagBlock]
    #: the SHA-256 of the running company.yaml's text: `doctor` tells an edited file from
    #: one merely touched or restored as it was
    config_sha256: Omitted[str] = None
    #: where the web dashboard serves (``http://127.0.0.1:8470``); absent when off or not
    #: serving (``companyd dashboard`` says why)
    dashboard: Omitted[str] = None
    #: where the stores that support it live: ``sqlite`` (files in ``state_dir``) or
    #: ``postgres schema 'acme'`` (never the database's URL; docs/storage.md)
    storage: str = "sqlite"
    #: with several daemons on one database (``state.backend: postgres``): ``leader`` or
    #: ``standby`` (docs/ha.md); absent on SQLite, where a daemon is alone
    role: Omitted[str] = None
    #: who leads (on a standby, the other daemon; on the leader, itself)
    leader: Omitted[AsBuilt[LeaderBlock]] = None
    #: the settings the running file changed that only a restart applies (memory.path,
    #: anthropic, alerts.telegram, …: the daemon runs the values it started with); absent
    #: when none
    restart_required: Omitted[list[str]] = None


class CompanyInfo(Frozen):
    """The ``company`` block of status."""

    name: str
    timezone: str


class AgentCounts(Frozen):
    """The ``agents`` block of status: how many agents are in each state."""

    total: int
    running: int
    paused: int
    failed: int
    busy: int


class SpendPeriodLine(Frozen):
    """Company spend over today or this month, in the ``spend`` block of status;
    ``simulated_usd`` is the part of ``used_usd`` the offline model's calls make (priced as
    Claude's would be; no money spent).
    """

    used_usd: float
    reserved_usd: float
    limit_usd: float | None
    resets_at: float | None
    simulated_usd: float = 0.0


class SpendLine(Frozen):
    """One agent's spend in the ``spend`` block of status (limits only where set)."""

    agent: str
    today_usd: float
    month_usd: float
    paused: bool
    daily_limit_usd: Omitted[float] = None
    monthly_limit_usd: Omitted[float] = None


class SpendStatus(Frozen):
    """The ``spend`` block of status; ``unavailable`` says why the ledger could not be
    read (a full state disk at start), and is absent otherwise.
    """

    currency: str
    today: SpendPeriodLine
    month: SpendPeriodLine
    agents: list[SpendLine]
    unavailable: Omitted[str] = None


class RoutineLine(Frozen):
    """One routine in status: epoch seconds for the times."""

    routine: str | None
    agent: str | None
    schedule: str | None
    next_fire: float | None
    last_fire: float | None
    last_outcome: str | None
    enabled: bool


class Status(Frozen):
    """``status``: the supervision tree (the supervisor's snapshot, paused agents marked),
    runs in flight, the pager's health, spend against budget and the routines.
    """

    now: float
    daemon: DaemonInfo
    company: CompanyInfo
    agents: AgentCounts
    tree: JSON
    runs_in_flight: AsBuilt[list[RunInFlightRow]]
    alerts: AsBuilt[PagerHealth]
    spend: SpendStatus
    routines: list[RoutineLine]


class DepartmentChanges(Frozen):
    """The departments a reload started, stopped and restarted."""

    added: list[str]
    removed: list[str]
    changed: list[str]


class ReloadApplied(Frozen):
    """``reload`` applied: agents started, stopped, restarted; the scheduler's moves;
    settings that take effect only at the next restart (absent when none).
    """

    applied: bool
    added: list[str]
    removed: list[str]
    changed: list[str]
    unchanged: int
    departments: DepartmentChanges
    routines: JSON
    failures: list[str]
    resumed: list[str]
    restart_required: Omitted[list[str]] = None
    #: the reloaded file's warnings, as ``validate`` prints them (absent when none)
    warnings: Omitted[list[str]] = None
    #: the other settings it changed and applied now (``company.budget``, ``alerts``, …;
    #: absent when none)
    settings: Omitted[list[str]] = None


class ReloadRejected(Frozen):
    """``reload`` refused: company.yaml's problems (or the daemon is stopping); the
    previous version keeps running.
    """

    applied: bool
    errors: list[str]
    message: str


# -- fault injection ---------------------------------------------------------------------------


class DashboardLogin(Frozen):
    """``dashboard_login``: a one-time login URL of the dashboard (single use, valid until
    ``expires_at``, epoch seconds).
    """

    url: str
    expires_at: float


class DebugCrashed(Frozen):
    """``debug crash``: whether the agent's next step raises."""

    action: str
    target: str
    crashed: bool


class DebugBlocked(Frozen):
    """``debug block``: the event loop was blocked for ``seconds``."""

    action: str
    seconds: float


class BackupWritten(Frozen):
    """``backup``: the archive written (docs/deploy.md "Backups and disaster recovery")."""

    path: str
    size: int
    seconds: float
    #: each member as the manifest lists it: name, kind, size, sha256, schema_version
    members: list[dict[str, Any]]
    #: older backups removed by ``keep`` (scheduled backups; empty for ``companyd backup``)
    pruned: list[str]


# -- the agents' tools -------------------------------------------------------------------------


class ToolsReport(Frozen):
    """``tools``: every tool of every running agent (or of one), ``day`` being today in the
    company's timezone: ``{agent, tool, origin, risk, policy, rate_limit, used_today,
    quarantined}`` each (docs/tools.md). ``origin``: ``memory``, ``colleagues``, ``mcp server
    NAME``…; ``risk``: from the MCP annotations (``read-only``, ``destructive``,
    ``unannotated (may destroy)``…) or ``built-in``; ``policy``: ``free`` or ``approval (…)``
    with why; ``rate_limit``: calls a day or None; ``quarantined``: held back until
    ``tools_approve``.
    """

    day: str
    tools: list[JSON]


class ToolsApproved(Frozen):
    """``tools_approve``: the held-back tools of MCP server ``server`` now approved and
    offered, ``{agent, tool}`` each (empty: nothing was held).
    """

    server: str
    approved: list[JSON]
