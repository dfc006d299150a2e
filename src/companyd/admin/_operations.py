"""What an operator can ask of a running daemon: the :class:`Admin` protocol.

The same operations are reachable from the CLI (through the control socket) and from the
operator's phone (Telegram commands and buttons). Both front ends call an :class:`Admin`;
the daemon implements it once (``companyd.daemon._operator``). Every operation returns one of
the frozen dataclasses of :mod:`companyd.admin._results`; the control socket validates the
arguments against the signatures below and serialises the results
(:mod:`companyd.admin._wire`). A refused request raises :class:`AdminError` whose message is
shown to the operator as it is (it quotes the value and names the valid choices).

The control socket offers exactly the public coroutine methods of :class:`Admin`: adding an
operation is a method here, its result dataclass, and the daemon's implementation
(docs/architecture.md, "Adding an Admin operation").
"""

from __future__ import annotations

from typing import Protocol

from companyd.admin._errors import AdminError, AdminStopping
from companyd.admin._results import (
    AskAnswer,
    BackupWritten,
    BudgetRaised,
    BudgetReport,
    ConfigView,
    DashboardLogin,
    DebugBlocked,
    DebugCrashed,
    DeskDecision,
    Inbox,
    JobHistory,
    JobResumed,
    JobRun,
    Jobs,
    MemoryChanges,
    MemoryEntity,
    MemorySearch,
    Paused,
    ProposalDecision,
    Proposals,
    ReloadApplied,
    ReloadRejected,
    Resumed,
    ResumedAll,
    Runs,
    RunTranscript,
    SpendReport,
    Status,
    TaskRetried,
    Tasks,
    ToolsApproved,
    ToolsReport,
    WebhookFired,
)

__all__ = ["Admin", "AdminError", "AdminStopping"]


class Admin(Protocol):
    """Operator operations on the running company."""

    async def status(self) -> Status:
        """Supervision tree (states, restart counts, uptime), runs in flight, spend today and
        this month against budget, next routines.
        """
        ...

    async def spend(
        self, by: str = "agent", period: str = "today", per_day: bool = False
    ) -> SpendReport:
        """Settled spend grouped ``by`` agent | model | routine | day over ``period``
        (``today``, ``month`` or ``YYYY-MM-DD..YYYY-MM-DD``); ``per_day``: one row per day
        and key (spend per day stacked by agent, model or routine).
        """
        ...

    async def budget(self) -> BudgetReport:
        """Each budget: limit, used, reserved, remaining, when it resets."""
        ...

    async def raise_budget(self, agent: str | None, usd: float, via: str = "cli") -> BudgetRaised:
        """Raise today's budget of ``agent`` (or the company when None) by ``usd``, once.
        ``via`` as for :meth:`pause`.
        """
        ...

    async def jobs(self) -> Jobs:
        """Each routine: schedule, next fire, last outcome, 7-day success rate."""
        ...

    async def job_history(self, routine: str, limit: int = 20) -> JobHistory:
        """The latest fires of one routine with outcome, reason, cost and run id."""
        ...

    async def run_job(self, routine: str, via: str = "cli") -> JobRun:
        """Fire a routine now (``via`` as for :meth:`pause`)."""
        ...

    async def fire_webhook(self, routine: str, webhook_id: str, body: str) -> WebhookFired:
        """Fire ``routine`` for a webhook request already verified by the caller (the
        dashboard's ``POST /hooks/<routine>``): ``body`` is given to the agent as the task's
        input; a ``webhook_id`` already accepted for the routine runs nothing again. Returns
        once the id is durably remembered and the fire started, not when the run ends.
        """
        ...

    async def resume_all(self, via: str = "cli") -> ResumedAll:
        """Let every paused agent run again (after topping up the API account); ``via`` as
        for :meth:`pause`.
        """
        ...

    async def resume_job(self, routine: str, via: str = "cli") -> JobResumed:
        """Let a routine that ``pause_after_failures`` paused fire again; ``via`` as for
        :meth:`pause`.
        """
        ...

    async def pause(self, agent: str, via: str = "cli") -> Paused:
        """Stop an agent from starting new runs (the current run finishes).

        Every operation that changes the company's state takes ``via``: where the
        operator asked (``cli``, ``telegram`` or ``dashboard``); it is recorded as an
        ``operator_action`` event (the dashboard records its own), done or refused.
        """
        ...

    async def resume(self, agent: str, via: str = "cli") -> Resumed:
        """Let a paused agent (operator or budget pause) run again; ``via`` as for
        :meth:`pause`.
        """
        ...

    async def ask(
        self,
        agent: str,
        question: str,
        timeout: float = 300.0,
        reply_to: str | None = None,
        task_id: str | None = None,
        via: str = "cli",
    ) -> AskAnswer:
        """Run a one-off task; the result has answer, models, tokens and cost. With
        ``reply_to`` (a run id of ``agent``) it is a follow-up in that run's thread: the
        agent sees that run's task and result with ``question`` as the founder's reply.
        With ``task_id`` (``task-`` + 12 hex digits, chosen by the caller) it is idempotent:
        a task the journal already holds is not run again — its outcome is waited for (a
        run resumed after a restart) or read (a run that ended) — so a caller that kept
        the id across a restart gets the answer once. ``via`` as for :meth:`pause`.
        """
        ...

    async def runs(
        self,
        agent: str | None = None,
        status: str | None = None,
        limit: int = 20,
        routine: str | None = None,
        since: float | None = None,
        finished: bool = False,
        deliveries: bool = False,
    ) -> Runs:
        """Recent runs, newest first: of ``agent``, with outcome ``status``, fired by
        ``routine``, started at or after ``since`` (epoch seconds), only ``finished`` ones;
        with ``deliveries`` each row also carries its result's delivery records (the run
        journal's, as ``run_show`` has them: they outlive restarts).
        """
        ...

    async def run_show(self, run_id: str) -> RunTranscript:
        """The whole transcript of one run (who asked, the task, each step and tool call,
        colleagues' runs, the reviewer's verdict, the thread, the answer, totals).
        """
        ...

    async def tasks(self, quarantined: bool = False) -> Tasks:
        """Tasks waiting, running or (with ``quarantined``) quarantined."""
        ...

    async def retry(self, task_id: str, via: str = "cli") -> TaskRetried:
        """Release a quarantined task and run it again; ``via`` as for :meth:`pause`."""
        ...

    async def proposals(self) -> Proposals:
        """Improver proposals awaiting approval (and recent decisions)."""
        ...

    async def approve(
        self, item_id: str, by: str = "", via: str = "cli"
    ) -> ProposalDecision | DeskDecision:
        """Approve what waits for the founder: a proposal (applied, then the config
        reloaded), a tool call (``ap-…``: the waiting run calls the tool) or a routine's
        result (``r-…``: the fire is done). A desk decision keeps ``by`` (who; empty:
        "founder") and ``via`` (``telegram``, ``cli`` or ``dashboard``) for the run's
        transcript; a decision is also an ``operator_action`` event.
        """
        ...

    async def reject(
        self, item_id: str, reason: str = "", by: str = "", via: str = "cli"
    ) -> ProposalDecision | DeskDecision:
        """Reject a proposal (discarded), a tool call (``ap-…``: the run gets the tool
        error "rejected by the founder: <reason>") or a routine's result (``r-…``);
        ``by`` and ``via`` as for :meth:`approve`.
        """
        ...

    async def answer(self, item_id: str, text: str, by: str = "", via: str = "cli") -> DeskDecision:
        """Answer an agent's question (``q-…``, from ``ask_founder``), or ask for changes
        to a routine's result (``r-…``: the agent does the work again); ``by`` and ``via``
        as for :meth:`approve`.
        """
        ...

    async def inbox(self) -> Inbox:
        """What waits for the founder, oldest first: approvals, questions, results,
        proposals and quarantined tasks, each with its actions.
        """
        ...

    async def revert(self, proposal_id: str, via: str = "cli") -> ProposalDecision:
        """Undo an applied proposal (then reload the config); ``via`` as for :meth:`pause`."""
        ...

    async def debug(
        self, action: str, target: str | None = None, seconds: float = 0.0
    ) -> DebugCrashed | DebugBlocked:
        """Fault injection for tests and the chaos benchmark: ``crash`` an agent (its next
        step raises), ``block`` the event loop for ``seconds`` (a synchronous sleep, as a
        careless blocking call would). Refused unless the daemon runs with
        ``COMPANYD_DEBUG=1`` in its environment.
        """
        ...

    async def backup(self, to: str) -> BackupWritten:
        """Write a consistent backup of the company to ``to`` (an absolute file name, or a
        directory for a dated file in it): its path, size, members and duration.
        """
        ...

    async def memory_search(self, query: str, limit: int = 50) -> MemorySearch:
        """Entities of company memory whose name, type or an observation contains ``query``
        (case-insensitive; ``""`` matches all), the first ``limit`` in file order.
        """
        ...

    async def memory_entity(self, name: str, depth: int = 1) -> MemoryEntity:
        """One memory entity: its type, observations and relations, and its neighbours
        within ``depth`` (1 to 3) hops.
        """
        ...

    async def memory_changes(self, limit: int = 50) -> MemoryChanges:
        """The latest writes to company memory made through the daemon, newest first."""
        ...

    async def config_view(self) -> ConfigView:
        """The running company.yaml resolved (defaults filled in, secrets redacted), the
        file's time against the running version's, and the last reload's result and errors.
        """
        ...

    async def dashboard_login(self) -> DashboardLogin:
        """A one-time login URL of the web dashboard (``/login?token=…``: valid 5 minutes,
        single use). Refused when the dashboard is off (``dashboard.enabled: false``) or not
        serving yet.
        """
        ...

    async def tools(self, agent: str | None = None) -> ToolsReport:
        """Every tool of every running agent (or of ``agent``): where it comes from, its
        risk, its approval policy, its daily rate limit and today's use, and whether it is
        held back (a new or changed MCP tool waiting for ``tools_approve``).
        """
        ...

    async def tools_approve(
        self, server: str, agent: str | None = None, via: str = "cli"
    ) -> ToolsApproved:
        """Approve the held-back tools of MCP server ``server`` (of ``agent``, or of every
        agent with a server of that name): offered at once, no restart.
        """
        ...

    async def reload(self, via: str = "cli") -> ReloadApplied | ReloadRejected:
        """Re-read company.yaml and apply the difference (or report why it was rejected);
        ``via`` as for :meth:`pause` (empty: the daemon's own reload, not recorded).
        """
        ...
