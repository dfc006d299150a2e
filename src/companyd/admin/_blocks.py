"""The blocks inside Admin results that another part of the daemon builds: typed dicts, so
mypy checks their keys where they are built and where they are read.

The run journal builds the rows of ``runs`` and ``tasks`` and the blocks of a transcript
(``run_show``: who asked, the task, the thread, the steps, the colleagues' runs, the review,
the totals); the spend book the ``spend`` report and the ``budget`` rows; the scheduler the
``jobs`` lines and ``job_history`` fires; the improver the ``proposals``; the staff the runs
in flight, the pager its health, and the daemon the ``reload`` and ``loop_lag`` blocks of
``status``. Each builder returns the type named here (this module is the operator
contract's, below every builder, so each can import it).

They are ``TypedDict`` rather than dataclasses because the builders and their readers (the
CLI printers, the pager's renderers, tests) already work on the JSON form, which is what a
``TypedDict`` describes: building one is building the dict the socket sends, and nothing
converts on the way. The key order of each literal is the JSON key order.

A field of a result holding one of these is marked :data:`AsBuilt`: the wire sends it as it
was built. Serialising it through its type instead would change the JSON scripts read (a
``float`` field holding ``0`` would become ``0.0``, a key the type lacks would be dropped).

Left as plain JSON (``dict[str, Any]``), on purpose: the supervision tree (a recursive
snapshot whose nodes carry each child's own started info, any JSON its child reports), a
reload's ``routines`` moves (the scheduler's ``dict[str, list[str]]``, which the
``daemon_reloaded`` event carries too; ``{}`` in a daemon without a scheduler), a desk
item's ``details`` (the tool's arguments, a question or a result: each kind's own) and a
backup's manifest members (the archive format's, read back from archives of any version).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict, TypeVar

from pydantic import GetPydanticSchema
from pydantic_core import core_schema

__all__ = [
    "AsBuilt",
    "AskedBy",
    "BudgetRow",
    "BudgetsData",
    "ColleagueRun",
    "FireRow",
    "HistoryData",
    "JobsData",
    "JournaledTask",
    "LoopLagBlock",
    "ModelStep",
    "OtherAttempt",
    "PagerHealth",
    "ProposalRow",
    "ReloadBlock",
    "ReloadRejectedBlock",
    "ResultDecision",
    "ResultDelivery",
    "ReviewStep",
    "RoutineRow",
    "RunInFlight",
    "RunInFlightRow",
    "RunRow",
    "RunTotals",
    "SpendPeriod",
    "SpendReportData",
    "SpendTotals",
    "Step",
    "Success7d",
    "TaskAsked",
    "TaskRow",
    "Thread",
    "ThreadRun",
    "Tokens",
    "ToolApproval",
    "ToolStep",
    "VerificationCheck",
    "VerificationStep",
]

T = TypeVar("T")

#: A result field holding a block built by another part of the daemon: typed for mypy, sent
#: to the wire exactly as built (no coercion, no key dropped).
AsBuilt = Annotated[T, GetPydanticSchema(lambda _type, _handler: core_schema.any_schema())]


# -- the run journal -----------------------------------------------------------------------


class RunRow(TypedDict):
    """One run in ``runs`` (``asked_by``: the run that asked for it, if a colleague did;
    ``deliveries``: its result's delivery records, only when asked for).
    """

    run_id: str
    task_id: str
    agent: str
    routine: str | None
    attempt: int
    status: str
    reason: str | None
    answer: str | None
    started: float
    ended: float | None
    cost_usd: float
    steps: int
    models: list[str]
    offline: bool
    reply_to: str | None
    asked_by: str | None
    deliveries: NotRequired[list[ResultDelivery]]


class JournaledTask(TypedDict):
    """A task as the run journal keeps it (a task journaled by an older version may lack
    the later keys).
    """

    id: str
    agent: str
    prompt: str
    source: str
    created: float
    routine: NotRequired[str | None]
    expected_output: NotRequired[str | None]
    reviewer: NotRequired[str | None]
    consult_chain: NotRequired[list[str]]
    reply_to: NotRequired[str | None]
    asked_by: NotRequired[str | None]
    asked_in: NotRequired[str | None]
    #: a routine's ``done_when`` conditions (present only when it has some)
    done_when: NotRequired[list[dict[str, Any]]]
    on_unmet: NotRequired[str]


class TaskRow(JournaledTask):
    """One task in ``tasks``: the task as journaled, then its state, crash count, errors
    and last update.
    """

    state: str
    crashes: int
    errors: list[str]
    updated: float


class AskedBy(TypedDict):
    """Who asked for a run: ``kind`` founder, routine or colleague (``run_id``: the asking
    run), ``source`` as the task says it.
    """

    kind: str
    who: str
    run_id: str | None
    source: str


class TaskAsked(TypedDict):
    """What a run was asked (the task's prompt, expected output, reviewer, creation)."""

    prompt: str
    expected_output: str | None
    reviewer: str | None
    created: float | None


class ThreadRun(TypedDict):
    """A run of a thread (``agent`` and ``started`` None, ``status`` ``pruned``: a run the
    retention removed).
    """

    run_id: str
    agent: str | None
    status: str
    started: float | None


class Thread(TypedDict):
    """The run this one follows up, and the runs that follow it up (oldest first)."""

    reply_to: ThreadRun | None
    replies: list[ThreadRun]


class OtherAttempt(TypedDict):
    """Another attempt at the same task."""

    run_id: str
    attempt: int
    status: str


class ColleagueRun(TypedDict):
    """A colleague's run this run asked for (``kind`` consult, delegate or review)."""

    run_id: str
    agent: str
    status: str
    reason: str | None
    kind: str
    tool_use_id: str | None


class Tokens(TypedDict):
    """Tokens of a model call, or of a whole run."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


class ModelStep(TypedDict):
    """A model call of a run (``tool_calls``: the ids of the tool calls it asked for)."""

    seq: int
    kind: Literal["model"]
    ts: float
    model: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float
    stop_reason: str | None
    offline: bool
    text: str
    tool_calls: list[str]


class ToolApproval(TypedDict):
    """The founder's decision on a ``require_approval`` tool call, and when."""

    item_id: str | None
    decision: str | None
    decided_by: str | None
    via: str | None
    asked: float | None
    decided: float | None
    reason: str


class ResultDelivery(TypedDict):
    """One delivery of a routine's result (``runs show``), as the pager recorded it.

    ``to``: the channel (telegram, digest, memory, file); ``outcome``: ``delivered``,
    ``queued`` (in the outbox, waiting for Telegram or the digest) or ``not_delivered``;
    ``at``: when (epoch seconds); ``where``: the file, the memory entity or the chat;
    ``message_id``: Telegram's; ``reason``: why not; ``kept``: the inbox item holding an
    undelivered result; ``text``: the whole record as one line.
    """

    to: str
    outcome: str
    at: float
    where: str | None
    message_id: int | None
    reason: str | None
    kept: str | None
    text: str


class ResultDecision(TypedDict):
    """The founder's decision on a run's result (a routine with ``approval: required``):
    one per round; ``decision`` is pending, approved, rejected, changes_requested or expired.
    Or on a question the run asked (``q-…``, round 1): pending, answered (``text``: the
    answer), expired or withdrawn.
    """

    item_id: str
    round: int
    decision: str
    by: str | None
    via: str | None
    asked: float
    decided: float | None
    text: str


class ToolStep(TypedDict):
    """A tool call of a run (None where the journal does not have it yet)."""

    seq: int
    kind: Literal["tool"]
    ts: float
    tool_use_id: str | None
    name: str | None
    input: Any
    result: str | None
    is_error: bool | None
    finished: float | None
    colleague_run: ColleagueRun | None
    approval: ToolApproval | None


class ReviewStep(TypedDict):
    """The reviewer's verdict on a run (``run_id``: the reviewer's run)."""

    seq: int
    kind: Literal["review"]
    ts: float
    reviewer: str | None
    approved: bool
    verdict: str
    run_id: str | None


class VerificationCheck(TypedDict):
    """One condition a final answer was checked against (companyd.agents._verification):
    ``source`` ``done_when`` or ``claim_check``; ``evidence`` what shows it met, or why it
    is not; ``step`` the transcript's number of the tool call that is the evidence.
    """

    source: str
    kind: str
    condition: str
    met: bool
    evidence: str
    tool_use_id: str | None
    seq: int | None
    step: NotRequired[int | None]


class VerificationStep(TypedDict):
    """A final answer checked against the run's record: every check, whether all held,
    why not, and the follow-up sent to the agent (None: the run ended with this verdict).
    """

    seq: int
    kind: Literal["verification"]
    ts: float
    attempt: int
    met: bool
    reason: str
    checks: list[VerificationCheck]
    follow_up: str | None


#: A step of a transcript, told apart by ``kind``.
Step = ModelStep | ToolStep | ReviewStep | VerificationStep


class RunTotals(TypedDict):
    """A run's totals: tokens, tool calls, cost, model calls, models, duration."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    tool_calls: int
    cost_usd: float
    steps: int
    models: list[str]
    duration_s: float | None


# -- the spend book ------------------------------------------------------------------------


class SpendTotals(TypedDict):
    """One row (or the total) of ``spend``: ``key`` is the agent, model, routine or day
    (None for the total, and for calls outside any routine).
    """

    day: NotRequired[str]  # only in a per-day report, where it comes first
    key: str | None
    calls: int
    input_tokens: int
    cache_write_5m_tokens: int
    cache_write_1h_tokens: int
    cache_read_tokens: int
    output_tokens: int
    cost_usd: float
    cost_usd_exact: str
    #: the part of ``cost_usd`` the offline model's calls make (simulated: no money spent);
    #: in reports, not in the ledger's raw totals
    simulated_usd: NotRequired[float]


#: The period of ``spend``: its label, first and last day (ISO); ``from`` is a Python keyword,
#: hence the functional form.
SpendPeriod = TypedDict("SpendPeriod", {"label": str, "from": str, "to": str})


class SpendReportData(TypedDict):
    """``spend`` as the spend book reports it."""

    by: str
    period: SpendPeriod
    rows: list[SpendTotals]
    total: SpendTotals


class BudgetRow(TypedDict):
    """One row of ``budget``. A budget has its limit (with today's raises), use,
    reservations and reset (``blocked``: why reservations are refused); a scope without a
    budget of its own has ``period`` and ``limit_usd`` None and says what it used today and
    this month instead, and why (``note``).
    """

    scope: str
    agent: str | None
    period: str | None
    key: NotRequired[str]
    limit_usd: float | None
    configured_usd: NotRequired[float]
    raised_today_usd: NotRequired[float]
    used_today_usd: NotRequired[float]
    used_month_usd: NotRequired[float]
    used_usd: NotRequired[float]
    reserved_usd: float
    remaining_usd: NotRequired[float]
    used_fraction: NotRequired[float]
    warn_at: NotRequired[list[float]]
    resets_at: NotRequired[str]
    blocked: NotRequired[str | None]
    note: NotRequired[str]


class BudgetsData(TypedDict):
    """``budget`` as the spend book reports it (``in_flight`` added by the book)."""

    timezone: str
    now: str
    day: str
    month: str
    budgets: list[BudgetRow]
    in_flight: NotRequired[int]


# -- the scheduler -------------------------------------------------------------------------


class FireRow(TypedDict):
    """One fire of a routine (``job_history``, and a routine's ``last``): ISO times."""

    fire_id: str
    routine: str
    agent: str
    kind: str
    scheduled: str | None
    fired: str | None
    started: str | None
    ended: str | None
    outcome: str | None
    reason: str | None
    cost_usd: float
    run_id: str | None
    task_id: str | None
    fires: int


class Success7d(TypedDict):
    """A routine's fires due and ok over the last 7 days, and their ratio."""

    due: int
    ok: int
    rate: float | None
    #: due fires that ended ``unverified`` (neither ok nor failed; absent from older daemons)
    unverified: NotRequired[int]


class RoutineRow(TypedDict):
    """One routine of ``jobs``: ISO times, None when absent."""

    routine: str
    agent: str
    schedule: str
    timezone: str
    enabled: bool
    concurrency: str
    catch_up: str
    precondition: str
    next_fire: str | None
    catch_up_pending: str | None
    last: FireRow | None
    in_progress: int
    success_7d: Success7d
    #: why ``pause_after_failures`` paused it (absent when it is not paused)
    paused: NotRequired[str]


class JobsData(TypedDict):
    """``jobs`` as the scheduler reports it."""

    daemon: bool
    generated: str
    routines: list[RoutineRow]


class HistoryData(TypedDict):
    """``job_history`` as the scheduler reports it: the routine as the daemon runs it (its
    agent and schedule, None when company.yaml no longer has it), then its fires.
    """

    routine: str
    agent: str | None
    schedule: str | None
    fires: list[FireRow]


# -- the improver --------------------------------------------------------------------------


class ProposalRow(TypedDict):
    """One proposal of ``proposals`` (without its two file hashes)."""

    id: str
    agent: str
    proposer: str
    reason: str
    file: str
    diff: str
    status: str
    created: float
    decided: float | None
    #: who made the last decision, through what, and the words with it (a rejection's
    #: reason); empty for a pending one, and for one decided before they were kept
    decided_by: NotRequired[str]
    via: NotRequired[str]
    note: NotRequired[str]


# -- the daemon ----------------------------------------------------------------------------


class RunInFlight(TypedDict):
    """A run in progress (the agents' staff): its task, start (epoch), cost and steps so
    far, the model of its last call.
    """

    run_id: str
    agent: str
    task_id: str
    routine: str | None
    source: str
    started_at: float
    cost_usd: float
    steps: int
    model: str | None


class RunInFlightRow(RunInFlight):
    """A run of status's ``runs_in_flight``: with the seconds it has run."""

    elapsed_s: float


class LeaderBlock(TypedDict):
    """Who leads a company of several daemons on one database (status ``daemon.leader``):
    its node name, host and pid, since when (epoch seconds) and its fencing epoch.
    """

    node: str
    host: str
    pid: int
    since: float
    epoch: int


class PagerHealth(TypedDict):
    """The ``alerts`` block of status: the sending half (``telegram``; alerts queued, held,
    refused for good; why it is degraded) and the receiving half (``commands``, failing
    since when and why).
    """

    telegram: str
    queued: int
    held: int
    failed: int
    reason: str
    commands: str
    commands_since: float | None
    commands_error: str
    #: the other channels (``alerts.channels``), when any is configured
    channels: NotRequired[list[ChannelHealth]]


class ChannelHealth(TypedDict):
    """One of ``alerts.channels`` in status: ``ok`` (its last send worked, or none was due),
    ``failing`` since when and why (redacted), or ``unset`` (its ``url_env`` was not set at
    the pager's start). Never its URL.
    """

    name: str
    state: Literal["ok", "failing", "unset"]
    since: float | None
    error: str


class ReloadRejectedBlock(TypedDict):
    """The last rejected reload: when, how many errors, the first one (secrets masked)."""

    at: float
    errors: int
    first_error: str


class ReloadBlock(TypedDict):
    """The ``daemon.reload`` block of status."""

    last_at: float | None
    last_result: str | None
    rejected: ReloadRejectedBlock | None


class LoopLagBlock(TypedDict):
    """The ``daemon.loop_lag`` block of status: milliseconds (to the µs), sample count."""

    current_ms: float
    max_ms: float
    samples: int
