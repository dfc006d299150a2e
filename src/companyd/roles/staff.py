"""The company's agents as one group: mailboxes, pauses and routing between agents.

:class:`Staff` owns the state that must outlive any one agent instance — each agent's
mailbox, its pause state, and the callers waiting for a task's outcome — and the
dependencies every agent uses (event bus, clock, journal, memory, spend, model backend).
Agents are supervised children created by :meth:`Staff.child`; when one crashes and is
restarted, its mailbox and the callers waiting on it are untouched.

It is also the scheduler's task sink (``submit``, ``inbox_size``, ``memory_marker``) and
implements agent-to-agent work:

* ``consult(agent, question)`` — only toward the agents in the asker's ``consult`` list,
  at most ``max_consult_depth`` deep, refusing cycles (A asks B asks A) with a clear tool
  error, and with a timeout;
* ``delegate(agent, task)`` — a manager hands work to a direct report (several in
  parallel), optionally checked by a reviewer;
* reviews — a reviewer agent checks a result against the task's ``expected_output``.

Pausing: the operator pauses and resumes agents; a budget refusal pauses the agent until
the budget period rolls over (``budget_reset`` event), the operator resumes it or raises
the budget; the API's organisation spend limit pauses every agent. Pauses survive a
restart of the daemon (they are journaled). A task sent to a paused agent is not queued
silently: it returns at once with ``budget_exhausted`` or ``cancelled`` and the reason.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from companyd._fs import DiskAlarm, is_disk_failure
from companyd.clock import Clock
from companyd.config import AgentConfig, CompanyConfig
from companyd.daemon.child import ChildContext, ChildFn
from companyd.events import Event, EventBus, Severity
from companyd.roles.improver import Proposals, improver_tools
from companyd.roles.journal import Journal, TaskState
from companyd.roles.model import ModelBackend
from companyd.roles.tasks import RunOutcome, RunStatus, Task, new_id
from companyd.roles.tools import (
    MCP_RETRY_MAX_SECONDS,
    MCP_RETRY_MIN_SECONDS,
    McpServerFailed,
    McpToolServer,
    MemoryPort,
    Tool,
    ToolBox,
    ToolCallContext,
    ToolError,
    json_schema,
    memory_tools,
)

__all__ = ["DEFAULT_COLLEAGUE_TIMEOUT", "SpendPort", "Staff"]

log = logging.getLogger(__name__)

#: How long an agent waits for a colleague's answer unless its colleague_timeout_seconds
#: says otherwise (the schema's default).
DEFAULT_COLLEAGUE_TIMEOUT = 300.0


class SpendPort(Protocol):
    """What agents need from the spend book (companyd.spend.SpendBook)."""

    async def reserve(
        self,
        *,
        agent: str,
        run_id: str,
        routine: str | None,
        model: str,
        input_tokens: int,
        max_output_tokens: int,
    ) -> Any: ...

    async def settle(
        self, reservation: Any, *, model: str, usage: Any, request_id: str | None = None
    ) -> Any: ...

    async def release(self, reservation: Any) -> None: ...

    async def forfeit(self, reservation: Any, *, reason: str) -> Any: ...

    def exhausted(self, agent: str) -> str | None: ...

    def note_api_spend_limit(self, message: str) -> None: ...


class MarkerPort(MemoryPort, Protocol):
    async def change_marker(self) -> str: ...


class InjectedCrash(RuntimeError):
    """A crash injected on purpose (``companyd`` debug op; tests and chaos benchmark)."""


@dataclass
class _Pause:
    reason: str
    budget: bool


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
    ) -> None:
        self.config = config
        self.bus = bus
        self.clock = clock
        self.journal = journal
        self.memory = memory
        self.spend = spend
        self.backend = backend
        self.budget_exhausted_error = budget_exhausted_error
        self.state_dir = state_dir
        self.proposals = proposals
        self._mailbox: dict[str, collections.deque[Task]] = {
            s: collections.deque() for s in config.agents
        }
        self._wakeup: dict[str, asyncio.Event] = {s: asyncio.Event() for s in config.agents}
        self._waiters: dict[str, list[asyncio.Future[RunOutcome]]] = {}
        self._paused: dict[str, _Pause] = {}
        self._running: dict[str, Task] = {}
        self._runs: dict[str, Any] = {}
        self._agent_tasks: dict[str, asyncio.Task[Any]] = {}
        self._injected: set[str] = set()
        #: task id → why: withdrawn between leaving its mailbox and its run starting
        self._withdraw_on_start: dict[str, str] = {}
        self._crash_pending: set[str] = set()
        self._prompts: dict[str, str] = {}
        #: Routine tasks the previous process left queued or running (restored by load()),
        #: and the outcomes of those that ended since: the scheduler asks for them once
        #: (:meth:`resumed`) to close the fire the restart interrupted with its true outcome.
        self._restored: set[str] = set()
        self._restored_outcomes: dict[str, RunOutcome] = {}
        self._remove_listener = bus.add_listener(self._on_event)
        #: Set when the daemon begins a graceful stop: every agent brings its current run to
        #: a checkpoint now (in parallel) rather than when its supervisor reaches it.
        self.draining = asyncio.Event()

    # -- start-up -----------------------------------------------------------------------

    async def load(self) -> None:
        """Restore pauses and queued tasks from the journal (once, before agents start).

        Consultations and reviews the previous process left open are withdrawn, not
        restored: the run that asked resumes from its journal, where that tool call has no
        recorded result (it is not idempotent: "outcome unknown"), so nobody would read the
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
            log.error("%s", reason)
            DiskAlarm.of(self.bus).failed("run journal", self.journal.path, exc)
            for slug in self.config.agents:
                self._paused[slug] = _Pause(reason, False)

    async def _load(self) -> None:
        await self.journal.open()
        orphans = await self.journal.withdraw_orphans(
            ("consult", "review"),
            "the daemon restarted while its asker waited; nobody waits for the answer",
            self.clock.time(),
        )
        if orphans:
            log.info("withdrew %d consultation(s)/review(s) left open by a restart", orphans)
        gone = await self.journal.withdraw_unassigned(
            list(self.config.agents), "its agent is no longer in company.yaml", self.clock.time()
        )
        if gone:
            log.warning("withdrew %d task(s) of agents no longer in company.yaml", gone)
        for agent, (reason, budget) in (await self.journal.paused()).items():
            if agent in self._mailbox:
                self._paused[agent] = _Pause(reason, budget)
        for slug in self.config.agents:
            queued = {t.id for t in self._mailbox[slug]}
            for task in await self.journal.queued_tasks(slug):
                if task.id not in queued:
                    self._mailbox[slug].append(task)
            if self._mailbox[slug]:
                self._wakeup[slug].set()
        self._restored = await self.journal.open_routine_tasks()

    def child(self, slug: str) -> ChildFn:
        """The supervised child body of agent ``slug`` (a fresh Agent per start)."""
        from companyd.roles.agent import Agent

        async def run(ctx: ChildContext) -> None:
            body = asyncio.ensure_future(Agent(self.config.agents[slug], self).run(ctx))
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

        return run

    def close(self) -> None:
        self._remove_listener()
        for futs in self._waiters.values():
            for f in futs:
                if not f.done():
                    f.cancel()

    # -- the task sink ------------------------------------------------------------------

    async def submit(self, task: Task) -> RunOutcome:
        """Queue ``task`` for its agent and wait for the run's outcome.

        Returns at once, without a run, when the agent is unknown, disabled or paused, or
        its budget is spent — the outcome says why.
        """
        refusal = self._refusal(task)
        if refusal is not None:
            return refusal
        fut: asyncio.Future[RunOutcome] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(task.id, []).append(fut)
        try:
            await self.journal.add_task(task, self.clock.time())
        except Exception as exc:
            self._waiters.pop(task.id, None)
            if not is_disk_failure(exc):
                raise
            return self.state_disk_failed(task, exc)
        self._enqueue(task)
        try:
            return await fut
        finally:
            waiting = self._waiters.get(task.id, [])
            if fut in waiting:
                waiting.remove(fut)
            if not waiting:
                self._waiters.pop(task.id, None)

    def resumed(self, task_id: str) -> Awaitable[RunOutcome] | None:
        """The outcome of task ``task_id`` for a scheduler that lost track of it — it was
        stopped, or the whole daemon was, while the run was queued or in progress.

        An awaitable that resolves when the task's run ends (at once if it ended since this
        process restored it from the journal), or None if the runtime does not hold the task
        (it ended before, or was never journaled).
        """
        done = self._restored_outcomes.pop(task_id, None)
        if done is not None:
            fut: asyncio.Future[RunOutcome] = asyncio.get_running_loop().create_future()
            fut.set_result(done)
            return fut
        held = (
            task_id in self._restored
            or any(t.id == task_id for t in self._running.values())
            or any(t.id == task_id for box in self._mailbox.values() for t in box)
        )
        if not held:
            return None
        fut = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(task_id, []).append(fut)

        async def wait() -> RunOutcome:
            try:
                return await fut
            finally:
                waiting = self._waiters.get(task_id, [])
                if fut in waiting:
                    waiting.remove(fut)
                if not waiting:
                    self._waiters.pop(task_id, None)

        return wait()

    def inbox_size(self, agent: str) -> int:
        """Tasks waiting in ``agent``'s mailbox (not counting the one running)."""
        return len(self._mailbox.get(agent, ()))

    def is_busy(self, agent: str) -> bool:
        return agent in self._running

    async def memory_marker(self) -> str:
        return await self.memory.change_marker()

    def state_disk_failed(self, task: Task, exc: BaseException) -> RunOutcome:
        """The journal could not take ``task`` (the state disk refuses writes): pause its
        agent, raise the one disk alert, and answer with a failed outcome and the reason."""
        reason = (
            f"state disk full: writes failing ({type(exc).__name__}: {exc}); the task was not "
            f"queued; free space on the state disk, then `companyd resume {task.agent}`"
        )
        log.error("task %s for %s not queued: %s", task.id, task.agent, reason)
        DiskAlarm.of(self.bus).failed("run journal", self.journal.path, exc)
        if task.agent in self.config.agents:
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

        cfg = self.config.agents.get(task.agent)
        if cfg is None:
            return refuse(
                RunStatus.FAILED,
                f"no agent named {task.agent!r}; agents: {', '.join(self.config.agents)}",
            )
        if not cfg.enabled:
            return refuse(RunStatus.CANCELLED, f"agent {task.agent!r} is disabled in company.yaml")
        pause = self._paused.get(task.agent)
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

    def _enqueue(self, task: Task) -> None:
        self._mailbox.setdefault(task.agent, collections.deque()).append(task)
        self._wakeup.setdefault(task.agent, asyncio.Event()).set()

    def requeue(self, task: Task) -> None:
        """Queue a task again (a reviewer rejected the previous attempt); waiters keep
        waiting for the final outcome."""
        self._enqueue(task)

    def drain(self) -> None:
        """Begin a graceful stop: runs stop at their next checkpoint, no new task starts."""
        self.draining.set()
        for wake in self._wakeup.values():
            wake.set()

    async def next_task(self, agent: str, stopping: asyncio.Event) -> Task | None:
        """The next task for ``agent`` once it is not paused; None when ``stopping`` is set.
        While draining, no task is handed out (it stays queued for the next start)."""
        box = self._mailbox[agent]
        wake = self._wakeup[agent]
        while not stopping.is_set():
            if box and agent not in self._paused and not self.draining.is_set():
                task = box.popleft()
                self._running[agent] = task
                return task
            wake.clear()
            stop = asyncio.ensure_future(stopping.wait())
            woke = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({stop, woke}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                woke.cancel()
        return None

    def finished(self, outcome: RunOutcome) -> None:
        """A task reached its final outcome: wake everyone waiting for it."""
        self._withdraw_on_start.pop(outcome.task_id, None)
        if self._running.get(outcome.agent) and self._running[outcome.agent].id == outcome.task_id:
            del self._running[outcome.agent]
        if outcome.task_id in self._restored:
            self._restored.discard(outcome.task_id)
            if outcome.task_id not in self._waiters:
                self._restored_outcomes[outcome.task_id] = outcome
        for fut in self._waiters.get(outcome.task_id, []):
            if not fut.done():
                fut.set_result(outcome)

    def running(self) -> dict[str, Task]:
        """agent → the task it is running now."""
        return dict(self._running)

    def run_started(self, agent: str, run: Any) -> None:
        """An agent began (or resumed) ``run`` (its live state, read by :meth:`in_flight`)."""
        self._runs[agent] = run
        reason = self._withdraw_on_start.pop(run.task.id, None)
        if reason is not None:
            run.withdraw(reason)

    def run_ended(self, agent: str) -> None:
        self._runs.pop(agent, None)

    def in_flight(self) -> list[dict[str, Any]]:
        """Runs in progress now, for ``companyd status``."""
        out = []
        for agent, r in self._runs.items():
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
        the task (it is not the task's fault). False if the agent is not running.
        """
        task = self._agent_tasks.get(agent)
        if task is None or task.done():
            return False
        if agent in self._runs:
            self._crash_pending.add(agent)
        else:
            self._injected.add(agent)
            task.cancel(msg="injected crash")
        return True

    def take_injected_crash(self, agent: str) -> None:
        """Raise :class:`InjectedCrash` if a crash of ``agent`` was requested (called by the
        agent between steps)."""
        if agent in self._crash_pending:
            self._crash_pending.discard(agent)
            raise InjectedCrash(f"injected crash of {agent} (debug)")

    # -- pauses -------------------------------------------------------------------------

    def paused(self) -> dict[str, str]:
        return {a: p.reason for a, p in self._paused.items()}

    def pause(self, agent: str, reason: str, *, budget: bool = False) -> None:
        """Stop ``agent`` taking new tasks (its current run ends on its own)."""
        if agent not in self.config.agents:
            raise KeyError(agent)
        was = self._paused.get(agent)
        self._paused[agent] = _Pause(reason, budget)
        self._spawn(self.journal.set_paused(agent, reason, budget, self.clock.time()))
        if was is None or was.reason != reason:
            self.bus.emit(
                "agent_paused", f"agent/{agent}", agent=agent, reason=reason, budget=budget
            )

    def resume(self, agent: str, reason: str = "operator") -> bool:
        """Let ``agent`` run again; False if it was not paused."""
        if self._paused.pop(agent, None) is None:
            return False
        self._spawn(self.journal.clear_paused(agent))
        self._wakeup[agent].set()
        self.bus.emit("agent_resumed", f"agent/{agent}", agent=agent, reason=reason)
        return True

    def api_spend_limit(self, message: str) -> None:
        """The organisation's API spend limit was hit: pause every agent and tell once."""
        self.spend.note_api_spend_limit(message)
        for slug in self.config.agents:
            if slug not in self._paused:
                self.pause(slug, "Anthropic API spend limit reached", budget=False)

    def api_key_refused(self, message: str) -> None:
        """The API refused the key (HTTP 401): no call can succeed until the operator fixes
        it. Pause every agent not yet paused and publish one critical ``api_key_refused``
        event (runs in flight that hit the same 401 add nothing)."""
        newly = [slug for slug in self.config.agents if slug not in self._paused]
        for slug in newly:
            self.pause(slug, "Anthropic API key refused (HTTP 401)")
        if newly:
            self.bus.emit("api_key_refused", "agents", message=message, paused=newly)

    def resume_budget_paused(self, reason: str) -> list[str]:
        """Resume every agent paused for its budget whose budgets now allow spending (a
        period rolled over, or a reloaded company.yaml raised a budget)."""
        resumed = []
        for agent, p in list(self._paused.items()):
            if p.budget and self.spend.exhausted(agent) is None and self.resume(agent, reason):
                resumed.append(agent)
        return resumed

    def _on_event(self, event: Event) -> None:
        if event.kind == "budget_reset":
            self.resume_budget_paused(f"budget period rolled over ({event.data.get('period', '')})")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        task.add_done_callback(_log_failure)

    # -- prompts and tools ----------------------------------------------------------------

    def system_prompt(self, agent: AgentConfig) -> str:
        """The stable, cacheable system prompt of ``agent``."""
        cached = self._prompts.get(agent.slug)
        if cached is not None:
            return cached
        cfg = self.config
        reports = [a.slug for a in cfg.agents.values() if a.reports_to == agent.slug]
        lines = [
            f"You are {agent.title} ({agent.slug}) at {cfg.name}.",
        ]
        if cfg.spec.company.context:
            lines += ["", cfg.spec.company.context.strip()]
        lines += ["", "Your instructions:", agent.instructions.strip(), ""]
        if agent.reports_to:
            boss = cfg.agents[agent.reports_to]
            lines.append(f"You report to {boss.title} ({boss.slug}).")
        if reports:
            lines.append("Your direct reports (use the delegate tool): " + ", ".join(reports) + ".")
        if agent.consult:
            lines.append("Colleagues you may consult: " + ", ".join(agent.consult) + ".")
        lines += [
            "",
            "The company memory is a shared knowledge graph; use the memory tools to read it "
            "before you act and to record decisions, facts and results after. Be concise.",
        ]
        prompt = "\n".join(lines)
        self._prompts[agent.slug] = prompt
        return prompt

    async def toolbox_for(self, agent: AgentConfig, stack: contextlib.AsyncExitStack) -> ToolBox:
        """Every tool ``agent`` may use; external MCP servers are started on ``stack``."""
        tools: list[Tool] = memory_tools(self.memory)
        tools += self._colleague_tools(agent)
        if agent.can_modify and self.proposals is not None:
            tools += improver_tools(
                agent.slug,
                agent.can_modify,
                self.proposals,
                lambda a: self.journal.runs(agent=a, limit=10),
            )
        box = ToolBox.build(tools, agent.tools)
        for name, spec in agent.mcp_servers.items():
            # One bad server never stops the agent: it runs without that server's tools,
            # an alert says why, and the server is tried again with backoff.
            try:
                server = await stack.enter_async_context(McpToolServer(name, spec))
            except McpServerFailed as exc:
                self._mcp_failed(agent.slug, name, exc.reason, 1, MCP_RETRY_MIN_SECONDS)
                retry = asyncio.create_task(
                    self._retry_mcp(agent, name, box), name=f"mcp-retry:{agent.slug}:{name}"
                )
                stack.push_async_callback(_cancel_and_wait, retry)
                continue
            box.add(server.tools, agent.tools)
        return box

    def _mcp_failed(
        self, agent: str, server: str, reason: str, attempt: int, retry_in: float
    ) -> None:
        # The first failure is a warning (an alert); later ones only count attempts.
        first = attempt == 1
        log.log(
            logging.WARNING if first else logging.INFO,
            "agent %s: MCP server %r %s; running without its tools, retry %d in %g s",
            agent,
            server,
            reason,
            attempt + 1,
            retry_in,
        )
        self.bus.emit(
            "mcp_server_failed",
            f"agent/{agent}",
            severity=Severity.WARNING if first else Severity.DEBUG,
            agent=agent,
            server=server,
            reason=reason,
            attempt=attempt,
            retry_in_s=retry_in,
        )

    async def _retry_mcp(self, agent: AgentConfig, name: str, box: ToolBox) -> None:
        """Start ``name`` again after a growing wait until it comes up, then keep it (and
        its tools in ``box``) until the agent stops and cancels this task."""
        spec = agent.mcp_servers[name]
        delay = MCP_RETRY_MIN_SECONDS
        attempt = 1
        while True:
            await self.clock.sleep(delay)
            attempt += 1
            try:
                server = McpToolServer(name, spec)
                await server.__aenter__()
            except McpServerFailed as exc:
                delay = min(delay * 2, MCP_RETRY_MAX_SECONDS)
                self._mcp_failed(agent.slug, name, exc.reason, attempt, delay)
                continue
            added: list[str] = []
            try:
                added = box.add(server.tools, agent.tools)
                log.info("agent %s: MCP server %r is up at attempt %d", agent.slug, name, attempt)
                self.bus.emit(
                    "mcp_server_recovered",
                    f"agent/{agent.slug}",
                    agent=agent.slug,
                    server=name,
                    attempt=attempt,
                    tools=sorted(added),
                )
                await asyncio.Event().wait()  # until the agent stops
            finally:
                box.remove(added)
                await server.__aexit__(None, None, None)

    def _colleague_tools(self, agent: AgentConfig) -> list[Tool]:
        tools: list[Tool] = []
        if agent.consult:

            async def consult(args: Mapping[str, Any], ctx: ToolCallContext) -> Any:
                return await self.consult(
                    agent, str(args.get("agent", "")), str(args.get("question", "")), ctx
                )

            tools.append(
                Tool(
                    name="consult",
                    description=(
                        "Ask a colleague a question and get their answer. Allowed colleagues: "
                        + ", ".join(agent.consult)
                    ),
                    input_schema=json_schema(
                        {
                            "agent": {"type": "string", "enum": list(agent.consult)},
                            "question": {"type": "string"},
                        },
                        ["agent", "question"],
                    ),
                    handler=consult,
                    idempotent=False,
                    family="colleagues",
                )
            )
        reports = [a.slug for a in self.config.agents.values() if a.reports_to == agent.slug]
        if reports:

            async def delegate(args: Mapping[str, Any], ctx: ToolCallContext) -> Any:
                return await self.delegate(agent, args, ctx)

            tools.append(
                Tool(
                    name="delegate",
                    description=(
                        "Hand a task to one of your direct reports and wait for the result. "
                        "Call it several times in one turn to delegate in parallel. "
                        "Direct reports: " + ", ".join(reports)
                    ),
                    input_schema=json_schema(
                        {
                            "agent": {"type": "string", "enum": reports},
                            "task": {"type": "string"},
                            "expected_output": {"type": "string"},
                            "reviewer": {"type": "string"},
                        },
                        ["agent", "task"],
                    ),
                    handler=delegate,
                    idempotent=False,
                    family="colleagues",
                )
            )
        return tools

    # -- agent to agent -------------------------------------------------------------------

    async def consult(
        self, asker: AgentConfig, target: str, question: str, ctx: ToolCallContext
    ) -> str:
        """Ask ``target`` a question on behalf of ``asker``; the answer text."""
        if target not in asker.consult:
            raise ToolError(
                f"{asker.slug} may not consult {target!r}; allowed: {', '.join(asker.consult)}"
            )
        chain = (*ctx.consult_chain, asker.slug)
        if target in chain:
            path = " → ".join((*chain, target))
            raise ToolError(
                f"consultation cycle refused: {path}. {target} is already waiting on this "
                "conversation; answer with what you know instead"
            )
        if len(chain) > asker.max_consult_depth:
            raise ToolError(
                f"consultation too deep: {' → '.join((*chain, target))} exceeds "
                f"max_consult_depth {asker.max_consult_depth}; answer with what you know"
            )
        if not question.strip():
            raise ToolError("consult needs a non-empty 'question'")
        task = Task(
            id=new_id("consult"),
            agent=target,
            prompt=question,
            source=f"agent:{asker.slug}",
            created=self.clock.time(),
            consult_chain=chain,
        )
        outcome = await self._wait_colleague(
            task, f"{target} did not answer", asker.colleague_timeout_seconds
        )
        if not outcome.ok:
            raise ToolError(f"{target} could not answer: {outcome.status} ({outcome.reason})")
        return outcome.answer

    async def delegate(
        self, manager: AgentConfig, args: Mapping[str, Any], ctx: ToolCallContext
    ) -> dict[str, Any]:
        """Hand a task to a direct report and wait for its outcome."""
        target = str(args.get("agent", ""))
        report = self.config.agents.get(target)
        if report is None or report.reports_to != manager.slug:
            reports = [a.slug for a in self.config.agents.values() if a.reports_to == manager.slug]
            raise ToolError(
                f"{target!r} is not a direct report of {manager.slug}; reports: "
                f"{', '.join(reports) or '(none)'}"
            )
        text = str(args.get("task", "")).strip()
        if not text:
            raise ToolError("delegate needs a non-empty 'task'")
        reviewer = args.get("reviewer")
        if reviewer is not None and reviewer not in self.config.agents:
            raise ToolError(
                f"reviewer {reviewer!r} is not an agent; agents: {', '.join(self.config.agents)}"
            )
        task = Task(
            id=new_id("task"),
            agent=target,
            prompt=text,
            source=f"agent:{manager.slug}",
            created=self.clock.time(),
            expected_output=(str(args["expected_output"]) if args.get("expected_output") else None),
            reviewer=str(reviewer) if reviewer else None,
            consult_chain=(*ctx.consult_chain, manager.slug),
        )
        outcome = await self._wait_colleague(
            task, f"{target} did not finish the task", manager.colleague_timeout_seconds
        )
        return {
            "agent": target,
            "status": str(outcome.status),
            "reason": outcome.reason,
            "result": outcome.answer,
        }

    async def review(self, task: Task, answer: str, worker: str) -> str | None:
        """Ask ``task.reviewer`` to check ``answer``; None if approved, else the reason."""
        assert task.reviewer is not None
        expected = task.expected_output or "(not stated: judge whether the task was done)"
        review = Task(
            id=new_id("review"),
            agent=task.reviewer,
            prompt=(
                f"Review the result {worker} produced for this task.\n\nTask: {task.prompt}\n\n"
                f"Expected output: {expected}\n\nResult:\n{answer}\n\n"
                "Reply with APPROVE or REJECT as the first word, then one sentence why."
            ),
            source=f"agent:{worker}",
            created=self.clock.time(),
            consult_chain=(*task.consult_chain, worker),
        )
        asker = self.config.agents.get(worker)
        timeout = asker.colleague_timeout_seconds if asker else DEFAULT_COLLEAGUE_TIMEOUT
        try:
            outcome = await self._wait_colleague(
                review, f"reviewer {task.reviewer} did not answer", timeout
            )
        except ToolError as exc:
            # no verdict is not an approval: the attempt fails and may be retried
            return f"the review could not be done ({exc})"
        if not outcome.ok:
            return f"the review could not be done ({outcome.status}: {outcome.reason})"
        verdict = outcome.answer.strip()
        if verdict.upper().startswith("APPROVE"):
            return None
        return verdict.removeprefix("REJECT").strip(" :—-") or "rejected without a reason"

    async def _wait_colleague(self, task: Task, what: str, timeout: float) -> RunOutcome:
        """Submit ``task`` and wait for its outcome, at most ``timeout`` seconds of the
        injected clock. When the asker stops waiting — the timeout, or its own run being
        cancelled — the task is withdrawn, so no colleague works (and spends) for nobody."""
        answer = asyncio.ensure_future(self.submit(task))
        timer = asyncio.ensure_future(self.clock.sleep(timeout))
        try:
            await asyncio.wait({answer, timer}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self.withdraw(task.id, "the asking run was stopped")
            raise
        finally:
            timer.cancel()
            if not answer.done():
                answer.cancel()
        if answer.done() and not answer.cancelled():
            return answer.result()
        reason = f"{what} within {timeout:g} s"
        self.withdraw(task.id, f"the asker stopped waiting: {reason}")
        raise ToolError(f"{reason}; the task was withdrawn. Go on with what you know")

    def withdraw(self, task_id: str, reason: str) -> None:
        """Withdraw task ``task_id``: nobody waits for its outcome any more.

        A running task has its run cancelled at once (it ends ``cancelled`` with the
        reason); a queued one leaves its mailbox; either way the journal records it, so a
        restart neither starts nor resumes it. Waiters still attached get a ``cancelled``
        outcome. Idempotent; a finished task is left as it is.
        """
        for run in self._runs.values():
            if run.task.id == task_id:
                run.withdraw(reason)
                return
        if any(t.id == task_id for t in self._running.values()):
            # handed to its agent, run not started yet: withdraw it as it starts
            self._withdraw_on_start[task_id] = reason
            return
        now = self.clock.time()
        for box in self._mailbox.values():
            queued = next((t for t in box if t.id == task_id), None)
            if queued is None:
                continue
            box.remove(queued)
            outcome = RunOutcome(
                task_id=task_id,
                run_id="",
                agent=queued.agent,
                status=RunStatus.CANCELLED,
                started=now,
                ended=now,
                reason=f"withdrawn before it started: {reason}",
            )
            for fut in self._waiters.get(task_id, []):
                if not fut.done():
                    fut.set_result(outcome)
            break
        # Also when the task is nowhere in memory: its asker stopped while it was being
        # journaled (the single journal thread orders this after that insert), or its run
        # stopped at a checkpoint for a restart to resume.
        self._spawn(self.journal.withdraw_task(task_id, reason, now))

    # -- operator views -----------------------------------------------------------------

    async def retry(self, task_id: str) -> Task:
        """Release a quarantined task and queue it again."""
        got = await self.journal.get_task(task_id)
        if got is None:
            raise KeyError(task_id)
        task, state, _, _ = got
        if state != TaskState.QUARANTINED:
            raise ValueError(f"task {task_id!r} is {state}, not quarantined")
        await self.journal.release_task(task_id, self.clock.time())
        self._enqueue(task)
        return task

    def reconfigure(self, config: CompanyConfig) -> None:
        """Adopt a reloaded company.yaml: new agents get mailboxes; prompts are rebuilt.
        (Once the supervision tree has stopped removed agents, :meth:`drop_removed`.)"""
        self.config = config
        self._prompts.clear()
        for slug in config.agents:
            self._mailbox.setdefault(slug, collections.deque())
            self._wakeup.setdefault(slug, asyncio.Event())
        for slug in list(self._paused):
            if slug not in config.agents:
                del self._paused[slug]

    def drop_removed(self) -> None:
        """Withdraw the tasks of agents a reload removed (call once the tree has stopped
        them): those waiting in a mailbox end ``cancelled`` for whoever waits on them (a
        routine's fire, an ``ask``), and the journal closes them and any run left
        unfinished, so none waits forever or comes back with a later agent of that name."""
        config = self.config
        now = self.clock.time()
        removed = [slug for slug in self._mailbox if slug not in config.agents]
        for slug in removed:
            stopped = self._running.pop(slug, None)  # its run stopped at a checkpoint
            for task in [*self._mailbox.pop(slug), *([stopped] if stopped else [])]:
                outcome = RunOutcome(
                    task_id=task.id,
                    run_id="",
                    agent=slug,
                    status=RunStatus.CANCELLED,
                    started=now,
                    ended=now,
                    reason=f"withdrawn: agent {slug!r} was removed from company.yaml",
                )
                for fut in self._waiters.get(task.id, []):
                    if not fut.done():
                        fut.set_result(outcome)
            self._wakeup.pop(slug, None)
        if removed:
            self._spawn(
                self.journal.withdraw_unassigned(
                    list(config.agents), "its agent was removed from company.yaml", now
                )
            )


async def _cancel_and_wait(task: asyncio.Task[Any]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background journal write failed: %r", task.exception())
