"""The company's agents as one group: the façade the daemon and the scheduler talk to.

:class:`Staff` owns the state that must outlive any one agent instance and hands each agent
its dependencies (:class:`~companyd.agents._deps.AgentDeps`, with itself as the
:class:`~companyd.agents._deps.StaffPort`). It is made of:

* :class:`~companyd.agents._mailbox.Mailboxes` — each agent's queue, the task it holds, its
  live run, and the callers waiting for a task's outcome;
* :class:`~companyd.agents._pauses.Pauses` — who is paused and why (operator, budget, API);
* :class:`~companyd.agents._colleagues.Colleagues` — consult, delegate and review;
* :class:`~companyd.agents._provision.Provisions` — each agent's system prompt and toolbox.

Agents are supervised children created by :meth:`Staff.child`; when one crashes and is
restarted, its mailbox and the callers waiting on it are untouched.

It is the scheduler's task sink (``submit``, ``inbox_size``, ``memory_marker``,
``resumed``): a task sent to a paused agent is not queued silently: it returns at once with
``budget_exhausted`` or ``cancelled`` and the reason. Pauses survive a restart of the daemon
(they are journaled), and so do queued tasks (restored by :meth:`Staff.load`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import Any

from companyd._fs import is_disk_failure
from companyd.admin import RunInFlight
from companyd.agents._agent import Agent
from companyd.agents._colleagues import REVIEW, Colleagues
from companyd.agents._deps import AgentDeps, InjectedCrash, MarkerPort, SpendPort
from companyd.agents._mailbox import Mailboxes
from companyd.agents._pauses import Pauses
from companyd.agents._provision import Provisions
from companyd.agents._run import RunState
from companyd.agents._tools import ToolBox
from companyd.agents._walls import WALL_REASON, QuotaWalls
from companyd.clock import Clock, clock_time
from companyd.config import AgentConfig, CompanyConfig
from companyd.desk import Desk, ItemKind, Proposals, RateLimits, ToolStore
from companyd.events import EventBus
from companyd.llm import ModelBackend
from companyd.runs import Journal, RunOutcome, RunStatus, Task, TaskState
from companyd.sandbox import ToolSandbox, tool_server_secrets
from companyd.supervision import ChildContext, ChildFn
from companyd.telemetry import NO_TRACING, Tracer

__all__ = ["Staff"]

log = logging.getLogger(__name__)


class Staff:
    """All agents of one company.

    Args:
        config: the company.
        bus: where events go.
        clock: time source.
        journal: the run journal.
        memory: the memory owner (tools and change markers).
        spend: the spend book (reservations and budgets).
        backend: the model backend (Claude or the offline stand-in).
        budget_exhausted_error: the exception type ``spend.reserve`` raises on refusal.
        state_dir: the daemon's state directory.
        proposals: the improver's proposal store (gives agents with ``can_modify`` their
            tools).
        desk: the founder's desk (approvals and ``ask_founder``), if any.
        tool_store: the tools store (rate-limit counts, MCP catalogues), if any.
        offline: ``backend`` is the offline stand-in (:attr:`AgentDeps.offline`).
    """

    def __init__(
        self,
        config: CompanyConfig,
        *,
        bus: EventBus,
        clock: Clock,
        journal: Journal,
        memory: MarkerPort,
        spend: SpendPort,
        backend: ModelBackend,
        budget_exhausted_error: type[Exception],
        state_dir: Path,
        proposals: Proposals | None = None,
        desk: Desk | None = None,
        tool_store: ToolStore | None = None,
        tracer: Tracer = NO_TRACING,
        offline: bool = False,
    ) -> None:
        self._config = config
        self.bus = bus
        self.clock = clock
        self.journal = journal
        self.memory = memory
        self.spend = spend
        self.backend = backend
        self.budget_exhausted_error = budget_exhausted_error
        self.state_dir = state_dir
        self.proposals = proposals
        self.mailboxes = Mailboxes(config.agents)
        self.pauses = Pauses(
            agents=lambda: self._config.agents,
            bus=bus,
            clock=clock,
            journal=journal,
            spend=spend,
            wake=self.mailboxes.wake,
            spawn=self._spawn,
            timezone=lambda: self._config.timezone,
        )
        self.walls = QuotaWalls(config.spec.anthropic.quota_pause_after)
        self.colleagues = Colleagues(self, clock)
        self.provisions = Provisions(
            config=lambda: self._config,
            bus=bus,
            clock=clock,
            journal=journal,
            memory=memory,
            colleagues=self.colleagues,
            proposals=proposals,
            desk=desk,
            sandbox=ToolSandbox(
                state_dir,
                protected=lambda: tool_server_secrets(self._config, state_dir),
            ),
            tool_store=tool_store,
        )
        rate_limits = (
            None
            if tool_store is None
            else RateLimits(
                tool_store, bus=bus, clock=clock, timezone=lambda: self._config.timezone
            )
        )
        #: What each agent is built from (a fresh Agent per start of its child).
        self.agent_deps = AgentDeps(
            staff=self,
            bus=bus,
            clock=clock,
            journal=journal,
            spend=spend,
            backend=backend,
            budget_exhausted_error=budget_exhausted_error,
            state_dir=state_dir,
            desk=desk,
            rate_limits=rate_limits,
            tracer=tracer,
            offline=offline,
        )
        self._agent_tasks: dict[str, asyncio.Task[Any]] = {}
        self._injected: set[str] = set()
        self._crash_pending: set[str] = set()
        self._remove_listener = bus.add_listener(self.pauses.on_event)
        #: Set when the daemon begins a graceful stop: every agent brings its current run to
        #: a checkpoint now (in parallel) rather than when its supervisor reaches it.
        self.draining = asyncio.Event()

    @property
    def config(self) -> CompanyConfig:
        """The running configuration (replaced by :meth:`reconfigure`)."""
        return self._config

    @property
    def timezone(self) -> str:
        """The company's time zone."""
        return self._config.timezone

    # -- start-up -----------------------------------------------------------------------

    async def load(self) -> None:
        """Restore pauses and queued tasks from the journal (once, before agents start).

        Reviews the previous process left open are withdrawn, not restored: the run that
        asked resumes from its journal and asks for a new review. Consultations are kept
        while the run that asked is unfinished — it resumes and waits for the answer again
        (:meth:`asked_task`; a colleague's run waiting for the founder goes on waiting for
        the same item, docs/desk.md) — and withdrawn otherwise, as nobody would read the
        answer. Delegated tasks are kept: their work may be the point (a post, a report).
        """
        try:
            await self._load()
        except Exception as exc:
            if not is_disk_failure(exc):
                raise
            # Started on a full (or failing) state disk: come up degraded — status, alerts
            # and the control socket work; every agent is paused until space returns.
            reason = (
                f"state disk full: writes failing at start ({type(exc).__name__}: {exc}); "
                "free space on the state disk, then resume the agents (`companyd resume "
                "<agent>`) or restart companyd"
            )
            log.error("%s", reason)  # the journal raised the disk alarm itself
            for slug in self._config.agents:
                self.pauses.restore(slug, reason, False)

    async def _load(self) -> None:
        await self.journal.open()
        # the removed agents' runs first: a consultation one of them asked is then asked by
        # a run that is over, and withdrawn below rather than resumed for nobody
        gone = await self.journal.withdraw_unassigned(
            list(self._config.agents), "its agent is no longer in company.yaml", self.clock.time()
        )
        if gone:
            log.warning("withdrew %d task(s) of agents no longer in company.yaml", gone)
        why = "the daemon restarted while its asker waited; nobody waits for the answer"
        orphans = await self.journal.withdraw_orphans((REVIEW,), why, self.clock.time())
        orphans += await self.journal.withdraw_orphans(
            ("consult",), why, self.clock.time(), unless_asker_runs=True
        )
        if orphans:
            log.info("withdrew %d consultation(s)/review(s) left open by a restart", orphans)
        ends = await self.journal.paused_until()
        for agent, (reason, budget) in (await self.journal.paused()).items():
            if agent in self.mailboxes:
                self.pauses.restore(agent, reason, budget, ends.get(agent))
        for slug in self._config.agents:
            self.mailboxes.restore(slug, await self.journal.queued_tasks(slug))
        self.mailboxes.restored(await self.journal.open_tasks())

    async def close_stale_founder_items(self) -> None:
        """Close (``withdrawn``) the approvals and questions still pending on the founder's
        desk for runs the journal has ended — withdrawn at this start (a consultation
        nobody waits for, an agent removed from company.yaml) or before: no run will act on
        their answer, so their messages must not offer buttons that do nothing. Call it
        once the pager listens (the ``founder_decided`` events edit those messages).
        """
        desk = self.agent_deps.desk
        if desk is None:
            return
        asked = {
            i.run_id
            for i in await desk.pending()
            if i.run_id and i.kind in (ItemKind.APPROVAL, ItemKind.QUESTION)
        }
        for run_id, (state, reason) in (await self.journal.run_states(asked)).items():
            if state != "running":
                closed = await desk.withdraw_run(run_id, f"its run ended: {reason or state}")
                log.info("closed %d desk item(s) of ended run %s", len(closed), run_id)

    def child(self, slug: str) -> ChildFn:
        """The supervised child body of agent ``slug`` (a fresh Agent per start)."""

        async def run(ctx: ChildContext) -> None:
            agent = Agent(self._config.agents[slug], self.agent_deps)
            body = asyncio.ensure_future(agent.run(ctx))
            self._agent_tasks[slug] = body
            try:
                await body
            except asyncio.CancelledError:
                if slug in self._injected and body.cancelled():
                    self._injected.discard(slug)
                    raise InjectedCrash(f"injected crash of {slug} (debug)") from None
                raise
            finally:
                if self._agent_tasks.get(slug) is body:
                    del self._agent_tasks[slug]
                    # a crash asked of this instance that it did not take is moot: it ended
                    self._injected.discard(slug)
                    self._crash_pending.discard(slug)

        return run

    def close(self) -> None:
        """Stop listening to the bus and cancel every caller still waiting for a run's outcome
        (the daemon is closing).
        """
        self._remove_listener()
        self.pauses.close()
        self.mailboxes.cancel_waiters()

    # -- the task sink ------------------------------------------------------------------

    async def submit(self, task: Task) -> RunOutcome:
        """Queue ``task`` for its agent and wait for the run's outcome.

        Returns at once, without a run, when the agent is unknown, disabled or paused, or
        its budget is spent — the outcome says why.
        """
        refusal = self._refusal(task)
        if refusal is not None:
            return refusal
        fut = self.mailboxes.waiter(task.id)
        try:
            await self.journal.add_task(task, self.clock.time())
        except Exception as exc:
            self.mailboxes.forget(task.id)
            if not is_disk_failure(exc):
                raise
            return self.state_disk_failed(task, exc)
        self.mailboxes.put(task)
        return await self.mailboxes.wait(task.id, fut)

    def resumed(self, task_id: str) -> Awaitable[RunOutcome] | None:
        """The outcome of task ``task_id`` for a scheduler that lost track of it — it was
        stopped, or the whole daemon was, while the run was queued or in progress.

        An awaitable that resolves when the task's run ends (at once if it ended since this
        process restored it from the journal), or None if the runtime does not hold the task
        (it ended before, or was never journaled).
        """
        return self.mailboxes.resumed(task_id)

    async def asked_task(self, run_id: str, tool_use_id: str) -> Task | None:
        """The task (a consultation, a delegation) the tool call ``tool_use_id`` of
        run ``run_id`` asked for, as the journal holds it; None if there is none.
        """
        return await self.journal.asked_task(run_id, tool_use_id)

    async def ended_outcome(self, task_id: str) -> RunOutcome | None:
        """How task ``task_id`` ended (its latest run's outcome), once the journal has it
        done; None while it is open or if no run of it ended.
        """
        got = await self.journal.get_task(task_id)
        if got is None or got[1] in (TaskState.QUEUED, TaskState.RUNNING):
            return None
        return await self.journal.last_outcome(task_id)

    def inbox_size(self, agent: str) -> int:
        """Tasks waiting in ``agent``'s mailbox (not counting the one running)."""
        return self.mailboxes.size(agent)

    def is_busy(self, agent: str) -> bool:
        """True while ``agent`` holds a task it was handed."""
        return self.mailboxes.is_busy(agent)

    async def memory_marker(self) -> str:
        """The company memory's change marker: it changes whenever the graph changes."""
        return await self.memory.change_marker()

    def state_disk_failed(self, task: Task, exc: BaseException) -> RunOutcome:
        """The journal could not take ``task`` (the state disk refuses writes; the journal
        raised the disk alarm itself): pause its agent and answer with a failed outcome and
        the reason.
        """
        reason = (
            f"state disk full: writes failing ({type(exc).__name__}: {exc}); the task was not "
            f"queued; free space on the state disk, then `companyd resume {task.agent}`"
        )
        log.error("task %s for %s not queued: %s", task.id, task.agent, reason)
        if task.agent in self._config.agents:
            self.pause(task.agent, reason)
        now = self.clock.time()
        return RunOutcome(
            task_id=task.id,
            run_id="",
            agent=task.agent,
            status=RunStatus.FAILED,
            started=now,
            ended=now,
            reason=reason,
        )

    def _refusal(self, task: Task) -> RunOutcome | None:
        now = self.clock.time()

        def refuse(status: RunStatus, reason: str) -> RunOutcome:
            return RunOutcome(
                task_id=task.id,
                run_id="",
                agent=task.agent,
                status=status,
                started=now,
                ended=now,
                reason=reason,
            )

        cfg = self._config.agents.get(task.agent)
        if cfg is None:
            return refuse(
                RunStatus.FAILED,
                f"no agent named {task.agent!r}; agents: {', '.join(self._config.agents)}",
            )
        if not cfg.enabled:
            return refuse(RunStatus.CANCELLED, f"agent {task.agent!r} is disabled in company.yaml")
        pause = self.pauses.get(task.agent)
        if pause is not None:
            status = RunStatus.BUDGET_EXHAUSTED if pause.budget else RunStatus.CANCELLED
            return refuse(status, f"agent {task.agent!r} is paused ({pause.reason})")
        why = self.spend.exhausted(task.agent)
        if why is not None:
            # Paused like an agent whose own call was refused (issue 15): it then resumes
            # with the others when the period rolls over or the budget is raised, instead of
            # being refused afresh at every fire of its routines.
            self.pause(task.agent, f"budget: {why}", budget=True)
            return refuse(RunStatus.BUDGET_EXHAUSTED, why)
        return None

    # -- the agents' side (StaffPort) ---------------------------------------------------

    def requeue(self, task: Task) -> None:
        """Queue a task again (a reviewer rejected the previous attempt); waiters keep
        waiting for the final outcome.
        """
        self.mailboxes.put(task)

    def drain(self) -> None:
        """Begin a graceful stop: runs stop at their next checkpoint, no new task starts."""
        self.draining.set()
        self.mailboxes.wake_all()

    async def next_task(self, agent: str, stopping: asyncio.Event) -> Task | None:
        """The next task for ``agent`` once it is not paused; None when ``stopping`` is set.
        While draining, no task is handed out (it stays queued for the next start).
        """
        return await self.mailboxes.take(
            agent, stopping, lambda: agent not in self.pauses and not self.draining.is_set()
        )

    def finished(self, outcome: RunOutcome) -> None:
        """A task reached its final outcome: wake everyone waiting for it."""
        self.mailboxes.finished(outcome)

    def running(self) -> dict[str, Task]:
        """Agent → the task it is running now."""
        return self.mailboxes.running()

    def run_started(self, agent: str, run: RunState) -> None:
        """An agent began (or resumed) ``run`` (its live state, read by :meth:`in_flight`)."""
        self.mailboxes.run_started(agent, run)

    def run_ended(self, agent: str) -> None:
        """Mark ``agent``'s run over: it no longer shows as in progress."""
        self.mailboxes.run_ended(agent)

    def system_prompt(self, agent: AgentConfig) -> str:
        """The stable, cacheable system prompt of ``agent``."""
        return self.provisions.system_prompt(agent)

    async def toolbox_for(self, agent: AgentConfig, stack: contextlib.AsyncExitStack) -> ToolBox:
        """Every tool ``agent`` may use; external MCP servers are started on ``stack``."""
        return await self.provisions.toolbox_for(agent, stack)

    async def review(
        self, task: Task, answer: str, worker: str, run_id: str | None = None
    ) -> str | None:
        """Ask ``task.reviewer`` to check ``answer``; None if approved, else the reason."""
        return await self.colleagues.review(task, answer, worker, run_id)

    def in_flight(self) -> list[RunInFlight]:
        """Runs in progress now, for ``companyd status``."""
        out: list[RunInFlight] = []
        for agent, r in self.mailboxes.runs().items():
            out.append(
                {
                    "run_id": r.run_id,
                    "agent": agent,
                    "task_id": r.task.id,
                    "routine": r.task.routine,
                    "source": r.task.source,
                    "started_at": r.started_wall,
                    "cost_usd": float(r.cost),
                    "steps": r.breaker.steps,
                    "model": r.models[-1] if r.models else None,
                }
            )
        return out

    # -- fault injection (tests, chaos benchmark) ----------------------------------------

    async def crash(self, agent: str) -> bool:
        """Make ``agent`` crash, as an unexpected error would (COMPANYD_DEBUG only).

        An idle agent crashes at once; a busy one at the end of its current step (once the
        step is journaled), as a bug in the code between model calls would, or as its run
        ends if that step was its last. Its supervisor
        restarts it and the run resumes from its journal. The crash is not counted against
        the task (it is not the task's fault). False if the agent is not running, or if a
        crash asked for earlier has not happened yet: that request adds no crash, so a
        caller counting ``True`` answers counts the crashes that happen.
        """
        task = self._agent_tasks.get(agent)
        if task is None or task.done():
            return False
        if agent in self._crash_pending or agent in self._injected:
            return False
        if self.mailboxes.has_run(agent):
            self._crash_pending.add(agent)
        else:
            self._injected.add(agent)
            task.cancel(msg="injected crash")
        return True

    def take_injected_crash(self, agent: str) -> None:
        """Raise :class:`InjectedCrash` if a crash of ``agent`` was requested (called by the
        agent between steps).
        """
        if agent in self._crash_pending:
            self._crash_pending.discard(agent)
            raise InjectedCrash(f"injected crash of {agent} (debug)")

    # -- pauses -------------------------------------------------------------------------

    def paused(self) -> dict[str, str]:
        """Agent → why it is paused."""
        return self.pauses.reasons()

    def pause(self, agent: str, reason: str, *, budget: bool = False) -> None:
        """Stop ``agent`` taking new tasks (its current run ends on its own)."""
        self.pauses.pause(agent, reason, budget=budget)

    def resume(self, agent: str, reason: str = "operator") -> bool:
        """Let ``agent`` run again; False if it was not paused."""
        return self.pauses.resume(agent, reason)

    def api_spend_limit(self, message: str) -> None:
        """The organisation's API spend limit was hit: pause every agent and tell once."""
        self.pauses.api_spend_limit(message)

    def api_key_refused(self, message: str) -> None:
        """The API refused the key (HTTP 401): pause every agent, one critical event."""
        self.pauses.api_key_refused(message)

    # -- quota walls (agents/_walls.py) ------------------------------------------------------

    def quota_wall(self, model: str) -> float | None:
        """When ``model``'s quota wall ends, or None when it may be called now."""
        return self.walls.until(model, self.clock.time())

    def meet_quota_wall(self, model: str, retry_after: float | None) -> float | None:
        """A call of ``model`` was rate limited for ``retry_after`` seconds: if that is a
        wall (longer than ``anthropic.quota_pause_after``), remember it and return its end.
        """
        if not self.walls.is_wall(retry_after):
            return None
        assert retry_after is not None
        until = self.clock.time() + retry_after
        self.walls.note(model, until)
        return until

    def quota_walled(self, agent: str, message: str) -> str | None:
        """Every model of ``agent``'s chain is behind a quota wall: pause it — and every
        other agent whose whole chain is walled — until the first of its models may be
        called again (one ``quota_wall`` event). The reason the paused agents show; None
        when a wall ended meanwhile (nothing paused: the run fails as before).
        """
        now = self.clock.time()
        chains = {slug: a.model.chain for slug, a in self._config.agents.items()}
        until = self.walls.chain_until(chains.get(agent, ()), now)
        if until is None:
            return None
        tz = self._config.timezone
        text = clock_time(until, tz)
        reason = f"{WALL_REASON}{text}: {message}"
        held = [agent] + [
            slug
            for slug, chain in chains.items()
            if slug != agent and self.walls.chain_until(chain, now) is not None
        ]
        models = sorted({m for slug in held for m in chains.get(slug, ())})
        by_end = {slug: self.walls.chain_until(chains[slug], now) or until for slug in held}
        for end in sorted(set(by_end.values())):
            self.pauses.pause_until(
                [slug for slug, e in by_end.items() if e == end],
                end,
                f"{WALL_REASON}{clock_time(end, tz)}: {message}",
                models=models,
                message=message,
            )
        return reason

    def rate_limited_until(self, agent: str) -> float | None:
        """When ``agent``'s quota-wall pause ends, or None when no wall pauses it (the
        scheduler records its fires meanwhile ``skipped: rate limited until HH:MM``).
        """
        pause = self.pauses.get(agent)
        if pause is None or pause.until is None or pause.until <= self.clock.time():
            return None
        return pause.until

    def resume_budget_paused(self, reason: str) -> list[str]:
        """Resume every agent paused for its budget whose budgets now allow spending."""
        return self.pauses.resume_budget_paused(reason)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        task.add_done_callback(_log_failure)

    # -- withdrawals and operator views ----------------------------------------------------

    def withdraw(self, task_id: str, reason: str) -> None:
        """Withdraw task ``task_id``: nobody waits for its outcome any more.

        A running task has its run cancelled at once (it ends ``cancelled`` with the
        reason); a queued one leaves its mailbox; either way the journal records it, so a
        restart neither starts nor resumes it. A run of it that no agent holds (stopped for
        a restart, not resumed) is ended in the journal, and the approvals and questions it
        left pending are closed then (:meth:`close_stale_founder_items`). Waiters still
        attached get a ``cancelled`` outcome. Idempotent; a finished task is left as it is.
        """
        now = self.clock.time()
        if self.mailboxes.withdraw(task_id, reason, now):
            return
        # Also when the task is nowhere in memory: its asker stopped while it was being
        # journaled (the single journal thread orders this after that insert), or its run
        # stopped at a checkpoint for a restart to resume and has not resumed (its agent
        # is switched off, or not started yet).

        async def withdraw() -> None:
            await self.journal.withdraw_task(task_id, reason, now)
            # That run ended just now, in the journal only: what it left waiting on the
            # founder's desk is closed at once, as a run in memory closes its own — not
            # at the next start or reload, with an Approve that does nothing meanwhile.
            await self.close_stale_founder_items()

        self._spawn(withdraw())

    async def retry(self, task_id: str) -> Task:
        """Release a quarantined task and queue it again."""
        got = await self.journal.get_task(task_id)
        if got is None:
            raise KeyError(task_id)
        task, state, _, _ = got
        if state != TaskState.QUARANTINED:
            raise ValueError(f"task {task_id!r} is {state}, not quarantined")
        await self.journal.release_task(task_id, self.clock.time())
        self.mailboxes.put(task)
        return task

    def reconfigure(self, config: CompanyConfig) -> None:
        """Adopt a reloaded company.yaml: new agents get mailboxes; prompts are rebuilt.
        Once the supervision tree has stopped removed agents, call :meth:`drop_removed`.
        """
        self._config = config
        self.walls.threshold = config.spec.anthropic.quota_pause_after
        self.provisions.forget_prompts()
        for slug in config.agents:
            self.mailboxes.ensure(slug)
        self.pauses.forget_removed()

    def drop_removed(self) -> None:
        """Withdraw the tasks of agents a reload removed (call once the tree has stopped
        them): those waiting in a mailbox end ``cancelled`` for whoever waits on them (a
        routine's fire, an ``ask``), and the journal closes them and any run left
        unfinished, so none waits forever or comes back with a later agent of that name;
        then the approvals and questions those runs left pending are closed
        (:meth:`close_stale_founder_items`).
        """
        config = self._config
        now = self.clock.time()
        if self.mailboxes.drop_agents(config.agents, now):

            async def withdraw() -> None:
                await self.journal.withdraw_unassigned(
                    list(config.agents), "its agent was removed from company.yaml", now
                )
                # what their runs left on the founder's desk would answer nobody
                await self.close_stale_founder_items()

            self._spawn(withdraw())


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background journal write failed: %r", task.exception())
