"""One role agent: a supervised child that runs tasks from its mailbox, one at a time.

An :class:`Agent` is created by its supervisor each time it starts and owns nothing that
must outlive it: its mailbox, pause state and waiting callers live with its staff (the
:class:`~companyd.agents._deps.StaffPort` it is given), its progress in the
:class:`~companyd.runs._journal.Journal`. So a restart is cheap and safe: the new instance
resumes the unfinished run from its last journaled step and carries on with the mailbox.
It takes every dependency explicitly (:class:`~companyd.agents._deps.AgentDeps`), so one can be
built without a daemon. The model step — reserve, call, settle, journal — is
:mod:`companyd.agents._calls`; the run's live state is :mod:`companyd.agents._run`.

A run is the tool-use loop — system prompt (instructions + company context) and tools as
the cacheable prefix, the task as the first user message, then model call → tool calls →
model call … until the model ends its turn — wrapped in the defences against failures that
do not raise (seeds/001 lists them):

* **runaway cost** — each call reserves its worst case against the budgets first
  (:class:`~companyd.spend.SpendBook`); a refusal ends the run ``budget_exhausted`` and
  pauses the agent;
* **loops and endless runs** — the per-run :class:`~companyd.agents._breaker.Breaker`;
* **a stuck run** — the heartbeat: no progress (a model or tool call starting or finishing)
  for ``heartbeat_seconds`` cancels the run and crashes the agent, so its supervisor
  restarts it;
* **a run that did 7 of 10 steps** — the journal: resume, never re-pay, never re-run a
  non-idempotent tool blindly;
* **one input that crashes the agent every time** — a task that made its agent crash twice
  is quarantined (never retried automatically);
* **valid-but-wrong output** — an optional reviewer agent checks the result against the
  task's ``expected_output``; a rejection is a failed attempt;
* **provider trouble** — graduated fallback through the agent's model chain.

A tool in ``require_approval`` waits for the founder before it is journaled as started
(:class:`~companyd.agents._founder.ApprovalGate`); that wait is neither a stall nor run time
(the heartbeat and ``max_seconds`` do not count it), and a stop request ends it at once,
leaving the run to resume — and wait again for the same approval — at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from companyd._aio import race
from companyd._fs import DiskAlarm, is_disk_failure
from companyd.agents._breaker import Breaker, BreakerTripped
from companyd.agents._calls import ModelCaller
from companyd.agents._deps import AgentDeps, InjectedCrash
from companyd.agents._founder import ApprovalGate
from companyd.agents._run import (
    PendingTool,
    RunEnded,
    RunState,
    Stopping,
    StopSignal,
    cancel_and_reap,
    stopped_from_outside,
    turn_ended,
)
from companyd.agents._tools import ToolBox, ToolCallContext, unknown_outcome_result
from companyd.agents._verification import calls_of, evaluate
from companyd.agents._walls import WALL_REASON
from companyd.config import AgentConfig
from companyd.events import (
    CircuitBreaker,
    RunFailed,
    RunFinished,
    RunStarted,
    Severity,
    TaskQuarantined,
)
from companyd.llm import ModelResponse, ToolResultBlock, ToolUseBlock, Usage, text_of, tool_uses_of
from companyd.runs import JournaledRun, RunOutcome, RunStatus, Step, Task, TaskState, new_id
from companyd.supervision import ChildContext
from companyd.telemetry import GenAI

__all__ = [
    "MAX_REVIEW_ATTEMPTS",
    "QUARANTINE_AFTER",
    "VERIFY_RETRIES",
    "Agent",
    "HeartbeatTimeout",
]

log = logging.getLogger(__name__)

#: A task that made its agent crash this many times is quarantined.
QUARANTINE_AFTER = 2
#: Runs a task gets when a reviewer keeps rejecting it.
MAX_REVIEW_ATTEMPTS = 2
#: Follow-ups a run gets, in the same run, when its answer does not hold (``on_unmet: retry``).
VERIFY_RETRIES = 1


class HeartbeatTimeout(Exception):
    """A run made no progress for ``heartbeat_seconds``: the agent crashes on purpose."""


class Agent:
    """One agent instance (a new one per supervisor start).

    Args:
        config: the agent's resolved configuration.
        deps: what it uses: its staff (mailbox, pauses, reviews, prompt and tools) and the
            services (bus, clock, journal, spend book, model backend).
    """

    def __init__(self, config: AgentConfig, deps: AgentDeps) -> None:
        self.config = config
        self.slug = config.slug
        self.deps = deps
        self._last_progress = deps.clock.monotonic()
        self._toolbox = ToolBox()
        self._current: RunState | None = None
        self._stop = StopSignal(deps.staff.draining)
        self._calls = ModelCaller(config, deps, self._stop, self._progress)
        #: consult/delegate calls in flight: waiting on a colleague is not being stuck
        self._colleague_waits = 0
        self._gate = ApprovalGate(deps.desk, config) if deps.desk is not None else None
        #: approvals being waited for, and since when (monotonic): the founder's time is
        #: neither a stall nor the run's time
        self._founder_waits = 0
        self._founder_since = 0.0

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self, ctx: ChildContext) -> None:
        """The supervised child body: report started, open tools, resume, then serve the
        mailbox.
        """
        deps = self.deps
        self._stop = StopSignal(deps.staff.draining, ctx.stopping)
        self._calls = ModelCaller(self.config, deps, self._stop, self._progress)
        async with contextlib.AsyncExitStack() as stack:
            # Started before the tool servers' handshakes: agents start one after another,
            # and a few slow or mute servers must not hold up the company (READY=1 and
            # systemd's start timeout). Tasks wait in the mailbox until the tools are in.
            ctx.started()
            self._toolbox = await deps.staff.toolbox_for(self.config, stack)
            try:
                unfinished_runs = await deps.journal.unfinished_runs(self.slug)
            except Exception as exc:
                if not is_disk_failure(exc):
                    raise
                # The journal cannot be opened (a full state disk at start): the runs
                # resume at the next start; the agent waits (paused) instead of crashing.
                log.error("agent %s: cannot read its unfinished runs: %s", self.slug, exc)
                unfinished_runs = []
            for unfinished in unfinished_runs:
                if ctx.stopping.is_set() or deps.staff.draining.is_set():
                    return
                await self._resume(unfinished, ctx)
                self._crash_if_asked(ctx)
            while not ctx.stopping.is_set():
                task = await deps.staff.next_task(self.slug, ctx.stopping)
                if task is None:
                    return
                await self._serve(task, ctx)
                self._crash_if_asked(ctx)

    def _crash_if_asked(self, ctx: ChildContext) -> None:
        """A crash asked for while a run was busy happens before its next step, or, if the
        run ended first (its last step was in flight), now that its outcome is recorded:
        never left waiting for a run that may not come (``debug crash`` said it crashed).
        """
        if not (ctx.stopping.is_set() or self.deps.staff.draining.is_set()):
            self.deps.staff.take_injected_crash(self.slug)

    async def _serve(self, task: Task, ctx: ChildContext) -> None:
        """Run one task from the mailbox to an outcome (or until a stop request)."""
        attempt = await self.deps.journal.attempts(task.id) + 1
        state = self._new_state(task, new_id("run"), attempt)
        try:
            await self.deps.journal.start_run(task, state.run_id, attempt, state.started_wall)
        except Exception as exc:
            if not is_disk_failure(exc):
                raise
            await self._state_disk_failed(state, exc)
            return
        self.deps.bus.publish(
            RunStarted(
                source=f"agent/{self.slug}",
                agent=self.slug,
                task_id=task.id,
                run_id=state.run_id,
                routine=task.routine,
            )
        )
        await self._guarded(state, ctx, resumed=False)

    async def _resume(self, jr: JournaledRun, ctx: ChildContext) -> None:
        state = self._new_state(jr.task, jr.run_id, jr.attempt)
        state.started_wall = jr.started
        self._replay(state, jr.steps)
        # Calls cut in flight by the stop (or a crash's restart) are kept as spent under the
        # run in the ledger but are no journaled step: the run's cost (max_cost_usd, `runs`)
        # starts from what the ledger holds.
        try:
            spent = await self.deps.spend.run_cost(jr.run_id)
        except Exception as exc:  # the ledger cannot be read now (a failing disk): the
            # run resumes on its journaled cost rather than not at all
            log.warning("agent %s: run %s cost not read: %s", self.slug, jr.run_id, exc)
        else:
            if spent > state.cost:
                state.lose(spent - state.cost)
        log.info(
            "agent %s resumes run %s of task %s from step %d",
            self.slug,
            jr.run_id,
            jr.task.id,
            state.breaker.steps,
        )
        self.deps.bus.publish(
            RunStarted(
                source=f"agent/{self.slug}",
                agent=self.slug,
                task_id=jr.task.id,
                run_id=jr.run_id,
                routine=jr.task.routine,
                resumed_at_step=state.breaker.steps,
            )
        )
        await self._guarded(state, ctx, resumed=True)

    def _new_state(self, task: Task, run_id: str, attempt: int) -> RunState:
        return RunState(
            task=task,
            run_id=run_id,
            attempt=attempt,
            started_wall=self.deps.clock.time(),
            messages=[{"role": "user", "content": self._task_message(task)}],
            breaker=Breaker(self.config.limits, self.deps.clock.monotonic()),
            offline=self.deps.offline,
        )

    # -- the guarded run: heartbeat, crash accounting, outcome ------------------------------

    async def _guarded(self, state: RunState, ctx: ChildContext, *, resumed: bool) -> None:
        """The run inside its ``invoke_agent`` span (a child of the routine fire's span
        when a routine's fire waits for it); the outcome's attributes are set by
        :meth:`_finish`.
        """
        tracer = self.deps.tracer
        task = state.task
        # the fire's span for a routine's task; the asking run's for a consultation,
        # delegation or review (each a task of its own, on another agent's task)
        parent = tracer.task_parent(task.id)
        if parent is None and task.asked_by:
            parent = tracer.task_parent(task.asked_by)
        state.span = tracer.start(
            f"invoke_agent {self.slug}",
            parent=parent,
            attributes={
                GenAI.OPERATION: "invoke_agent",
                GenAI.PROVIDER: GenAI.ANTHROPIC,
                GenAI.AGENT_NAME: self.slug,
                GenAI.AGENT_ID: self.slug,
                GenAI.CONVERSATION_ID: state.run_id,
                GenAI.REQUEST_MODEL: self.config.model.primary,
                GenAI.RUN_ID: state.run_id,
                GenAI.TASK_ID: task.id,
                GenAI.ROUTINE: task.routine,
                "companyd.run.attempt": state.attempt,
                "companyd.run.resumed": resumed,
            },
        )
        tracer.bind_task(state.run_id, state.span)
        try:
            await self._guarded_run(state, ctx, resumed=resumed)
        except BaseException as exc:
            state.span.fail(type(exc).__name__, str(exc))
            raise
        finally:
            tracer.unbind_task(state.run_id)
            state.span.end()

    async def _guarded_run(self, state: RunState, ctx: ChildContext, *, resumed: bool) -> None:
        deps = self.deps
        self._current = state
        deps.staff.run_started(self.slug, state)
        self._progress()
        work = asyncio.create_task(self._execute(state, ctx, resumed=resumed))
        try:
            overrun = await self._watch_heartbeat(work, state)
            status, reason = overrun or work.result()
        except Stopping:
            return  # journaled as running; resumed on the next start
        except InjectedCrash:
            raise  # a test's or the chaos benchmark's crash: not the task's fault
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit) or stopped_from_outside(exc):
                raise  # the process or this agent is being stopped: not the task's fault
            # The agent crashes: let its supervisor restart it. Count the crash against the
            # task first, so an input that crashes the agent every time ends in quarantine —
            # whatever it raised: a BaseException that is not an Exception, or a stray
            # CancelledError out of a tool, would otherwise crash-loop the agent uncounted.
            if is_disk_failure(exc):
                # The state disk refuses writes (full, I/O error): not the task's fault, and
                # a restart would only fail the same way. Fail the run, pause the agent, stay up.
                await self._state_disk_failed(state, exc)
                return
            error = f"{type(exc).__name__}: {exc}"
            crashes = await deps.journal.record_crash(state.task.id, error, deps.clock.time())
            if crashes >= QUARANTINE_AFTER:
                await self._quarantine(state, crashes)
            raise
        finally:
            self._current = None
            deps.staff.run_ended(self.slug)
            if not work.done():
                await cancel_and_reap(work, self.slug)
        if status is RunStatus.OK and state.task.reviewer and self.slug != state.task.reviewer:
            try:
                verdict = await deps.staff.review(state.task, state.answer, self.slug, state.run_id)
            except Stopping:
                return  # journaled as running; resumed (and reviewed again) on the next start
            await self._journal_review(state, verdict)
            if verdict is not None:
                status, reason = RunStatus.FAILED, f"rejected by {state.task.reviewer}: {verdict}"
        await self._finish(state, status, reason)

    async def _journal_review(self, state: RunState, verdict: str | None) -> None:
        """Journal the reviewer's verdict as a step of the run (``companyd runs show``)."""
        reviewer = state.task.reviewer or ""
        state.seq += 1
        try:
            await self.deps.journal.append_step(
                state.run_id,
                state.seq,
                "review",
                {"reviewer": reviewer, "approved": verdict is None, "verdict": verdict or ""},
                self.deps.clock.time(),
            )
        except Exception as exc:
            if not is_disk_failure(exc):
                raise
            # the verdict still reaches the run's outcome (its reason) and the events
            log.error("agent %s: review of run %s not journaled: %s", self.slug, state.run_id, exc)

    async def _watch_heartbeat(
        self, work: asyncio.Task[tuple[RunStatus, str | None]], state: RunState
    ) -> tuple[RunStatus, str | None] | None:
        """Wait for ``work``; raise :class:`HeartbeatTimeout` on a stall. A run still busy
        (in a model or tool call) at ``max_seconds`` is cancelled there and ends
        ``circuit_breaker`` (returned), rather than at the next step's check; a run whose
        task is withdrawn (``Staff.withdraw``) is cancelled at once and ends
        ``cancelled``.
        """
        clock = self.deps.clock
        limit = self.config.heartbeat_seconds
        max_seconds = self.config.limits.max_seconds
        while not work.done():
            if state.withdrawn is not None:
                await cancel_and_reap(work, self.slug)
                await self._close_founder_items(state, state.withdrawn)
                return RunStatus.CANCELLED, f"withdrawn: {state.withdrawn}"
            if self._founder_waits:
                # waiting for the founder's approval: not stuck, and not the run's time
                # (its approval_timeout bounds the wait)
                self._progress()
                await race(work, clock.sleep(limit), state.withdrawn_signal.wait())
                continue
            now = clock.monotonic()
            run_left = (
                max_seconds - (now - state.breaker.started) if max_seconds is not None else None
            )
            if run_left is not None and run_left <= 0:
                await cancel_and_reap(work, self.slug)
                tripped = BreakerTripped(
                    "max_seconds",
                    f"max_seconds {max_seconds:g} reached (ran {now - state.breaker.started:.1f} "
                    "s; the call in flight was cancelled)",
                )
                self._breaker_event(state, tripped)
                return RunStatus.CIRCUIT_BREAKER, str(tripped)
            remaining = limit - (now - self._last_progress)
            if remaining <= 0 and self._colleague_waits:
                # The run waits on a colleague (consult, delegate): that colleague's own
                # heartbeat watches its run, and the wait has its own timeout.
                self._progress()
                continue
            if remaining <= 0:
                await cancel_and_reap(work, self.slug)
                raise HeartbeatTimeout(
                    f"run made no progress for {limit:g} s (heartbeat_seconds); "
                    "cancelled and the agent crashed so its supervisor restarts it"
                )
            wait = remaining if run_left is None else min(remaining, run_left)
            await race(work, clock.sleep(wait), state.withdrawn_signal.wait())
        return None

    def _progress(self) -> None:
        self._last_progress = self.deps.clock.monotonic()

    async def _close_founder_items(self, state: RunState, reason: str) -> None:
        """Close what the withdrawn run left waiting on the founder's desk (an approval, a
        question): nothing will act on its answer, so its message must not offer buttons
        that do nothing (docs/desk.md, "Colleagues across a restart").
        """
        desk = self.deps.desk
        if desk is None:
            return
        try:
            closed = await desk.withdraw_run(state.run_id, reason)
        except Exception as exc:
            # the item stays pending (and expires at its deadline); the run still ends
            log.error(
                "agent %s: run %s: its desk items not closed: %r", self.slug, state.run_id, exc
            )
            return
        for item in closed:
            log.info(
                "agent %s: withdrew %s of run %s: %s", self.slug, item.id, state.run_id, reason
            )

    async def _quarantine(self, state: RunState, crashes: int) -> None:
        deps = self.deps
        got = await deps.journal.get_task(state.task.id)
        errors = got[3] if got else []
        outcome = self._outcome(
            state,
            RunStatus.QUARANTINED,
            f"quarantined after {crashes} crashes: {errors[-1] if errors else 'unknown error'}",
        )
        await deps.journal.finish_run(outcome, TaskState.QUARANTINED)
        deps.bus.publish(
            TaskQuarantined(
                source=f"agent/{self.slug}",
                agent=self.slug,
                task_id=state.task.id,
                run_id=state.run_id,
                routine=state.task.routine,
                crashes=crashes,
                errors=errors[-QUARANTINE_AFTER:],
                prompt=state.task.prompt[:200],
            )
        )
        deps.staff.finished(outcome)

    async def _state_disk_failed(self, state: RunState, exc: BaseException) -> None:
        """A ledger or journal write failed on the disk: the run fails with the reason, the
        agent is paused. The store that failed raised the disk alarm itself (one
        ``state_disk_full`` alert, shared by every store, cleared when each failing store
        writes again); a disk failure no store reported is put on the run journal's account,
        which clears it with its next write.
        """
        deps = self.deps
        reason = (
            f"state disk full: writes failing ({type(exc).__name__}: {exc}); free space on "
            f"the state disk, then `companyd resume {self.slug}`"
        )
        log.error("agent %s: run %s failed: %s", self.slug, state.run_id, reason)
        alarm = DiskAlarm.of(deps.bus)
        if not alarm.failing:
            alarm.failed("run journal", deps.journal.path, exc)
        deps.staff.pause(self.slug, reason)
        await self._finish(state, RunStatus.FAILED, reason)

    async def _finish(self, state: RunState, status: RunStatus, reason: str | None) -> None:
        deps = self.deps
        outcome = self._outcome(state, status, reason)
        span = state.span
        span.set(GenAI.COST, outcome.cost_usd)
        span.set(GenAI.RUN_STATUS, str(status))
        span.set(GenAI.RUN_VERIFICATION, outcome.verification)
        span.set(GenAI.INPUT_TOKENS, state.usage.input_tokens)
        span.set(GenAI.OUTPUT_TOKENS, state.usage.output_tokens)
        span.set("companyd.run.steps", outcome.steps)
        if status is not RunStatus.OK:
            span.fail(str(status), reason or "")
        try:
            await deps.journal.finish_run(outcome, TaskState.DONE)
        except Exception as exc:
            if not is_disk_failure(exc):
                raise
            # The run stays open in the journal and is resumed at the next start; its
            # outcome still reaches the events and whoever waits for it.
            log.error("agent %s: run %s not journaled: %s", self.slug, state.run_id, exc)
            if "writes failing" not in (reason or ""):
                deps.staff.pause(self.slug, f"state disk full: writes failing ({exc})")
        src = f"agent/{self.slug}"
        common: dict[str, Any] = {
            "agent": self.slug,
            "task_id": state.task.id,
            "run_id": state.run_id,
            "routine": state.task.routine,
            "cost_usd": outcome.cost_usd,
            "steps": outcome.steps,
            "models": list(outcome.models),
            "offline": outcome.offline,
        }
        if status is RunStatus.OK:
            deps.bus.publish(
                RunFinished(
                    source=src,
                    status=str(status),
                    **common,
                )
            )
        elif status is RunStatus.UNVERIFIED:
            # the run finished; its answer did not hold (a routine's repeated ones alert:
            # routine_unverified)
            deps.bus.publish(RunFinished(source=src, status=str(status), reason=reason, **common))
        else:
            # A run a quota wall ended is told once, by the wall's own event (agents/_pauses.py).
            walled = status is RunStatus.CANCELLED and (reason or "").startswith(WALL_REASON)
            deps.bus.publish(
                RunFailed(
                    source=src,
                    status=str(status),
                    reason=reason,
                    severity=Severity.INFO if walled else Severity.WARNING,
                    **common,
                )
            )
        if status is RunStatus.FAILED and reason and reason.startswith("rejected by"):
            attempts = await deps.journal.attempts(state.task.id)
            if attempts < MAX_REVIEW_ATTEMPTS:
                # a rejected result is a failed attempt: try once more with the feedback
                retry = replace(
                    state.task,
                    prompt=f"{state.task.prompt}\n\nA previous attempt was {reason}. "
                    "Address that feedback.",
                )
                deps.staff.requeue(retry)
                return
        deps.staff.finished(outcome)

    def _outcome(self, state: RunState, status: RunStatus, reason: str | None) -> RunOutcome:
        return RunOutcome(
            task_id=state.task.id,
            run_id=state.run_id,
            agent=self.slug,
            status=status,
            started=state.started_wall,
            ended=self.deps.clock.time(),
            reason=reason,
            answer=state.answer,
            cost_usd=float(state.cost),
            steps=state.breaker.steps,
            tokens=state.usage.total_tokens,
            models=tuple(dict.fromkeys(state.models)),
            offline=state.offline,
            verification=(
                "unverified"
                if status is RunStatus.UNVERIFIED
                else "verified"
                if state.verified
                else "none"
            ),
        )

    # -- the tool-use loop ------------------------------------------------------------------

    async def _execute(
        self, state: RunState, ctx: ChildContext, *, resumed: bool
    ) -> tuple[RunStatus, str | None]:
        """Run the loop to an end. Returns (status, reason); raises Stopping on a stop
        request, anything else on a crash.
        """
        try:
            # the stop reason of a final answer not yet verified (a resumed run's last step)
            ended = await self._complete_pending_tools(state) if resumed else None
            while True:
                if ended is None:
                    if self._stop.requested():
                        raise Stopping
                    self.deps.staff.take_injected_crash(self.slug)
                    state.breaker.check(self.deps.clock.monotonic())
                    response = await self._step(state)
                    state.unverified = None  # the follow-up was answered
                    if response.stop_reason == "tool_use" and response.tool_uses:
                        await self._run_tools(state, response.tool_uses)
                        continue
                    if response.stop_reason == "pause_turn":
                        continue
                    state.answer = response.text
                    ended = response.stop_reason
                status, reason = turn_ended(ended)
                ended = None
                if status is not RunStatus.OK:
                    return status, reason
                retry, unmet = await self._verify(state)
                if retry:
                    continue  # the follow-up is the next user turn: another step
                if unmet is not None:
                    return RunStatus.UNVERIFIED, unmet
                return status, reason
        except BreakerTripped as exc:
            self._breaker_event(state, exc)
            return RunStatus.CIRCUIT_BREAKER, self._unverified_before(state, str(exc))
        except RunEnded as exc:
            return exc.status, self._unverified_before(state, exc.reason)

    @staticmethod
    def _unverified_before(state: RunState, reason: str | None) -> str | None:
        """``reason``, saying that the answer before it did not hold when a limit (or a
        budget, or every model failing) stopped the follow-up that was to fix it.
        """
        if state.unverified is None:
            return reason
        return f"{reason or 'stopped'}; before that, the answer was unverified: {state.unverified}"

    def _breaker_event(self, state: RunState, exc: BreakerTripped) -> None:
        self.deps.bus.publish(
            CircuitBreaker(
                source=f"agent/{self.slug}",
                agent=self.slug,
                task_id=state.task.id,
                run_id=state.run_id,
                routine=state.task.routine,
                limit=exc.limit,
                reason=str(exc),
            )
        )

    async def _step(self, state: RunState) -> ModelResponse:
        """One model call (with fallback), settled and journaled before returning."""
        system = self.deps.staff.system_prompt(self.config)
        return await self._calls.step(state, system, self._toolbox.definitions())

    async def _run_tools(self, state: RunState, tool_uses: Sequence[ToolUseBlock]) -> None:
        """Run the tool calls of one response (concurrently; the model asked for them
        together), journaling each start and result, then append the results turn.

        If one call raises (a crash), the others are cancelled and awaited before the error
        propagates: no tool call outlives the run that started it (an orphan would finish
        its effect after the restarted agent re-ran or wrote off the same call).
        """
        for tu in tool_uses:
            state.breaker.note_tool_call(str(tu.get("name")), tu.get("input") or {})
        calls = [asyncio.ensure_future(self._run_tool(state, tu)) for tu in tool_uses]
        try:
            results = await asyncio.gather(*calls)
        finally:
            # gather cancels its calls only when it is cancelled itself, not when one fails
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
        state.messages.append({"role": "user", "content": list(results)})

    async def _run_tool(self, state: RunState, tool_use: ToolUseBlock) -> ToolResultBlock:
        deps = self.deps
        tool_id = str(tool_use.get("id"))
        name = str(tool_use.get("name"))
        limit = self.config.tools.rate_limit.get(name)
        refused = None
        # checked before the founder is asked (no approval for a call that cannot run) and
        # counted when it runs
        if (
            limit is not None
            and deps.rate_limits is not None
            and await deps.rate_limits.over(self.slug, name, limit)
        ):
            refused = await self._rate_refusal(tool_use, limit)
        if refused is None and self._needs_approval(name):
            refused = await self._founder_approval(state, tool_use)
        if refused is None and limit is not None:
            refused = await self._rate_refusal(tool_use, limit)
        if refused is not None:
            state.seq += 1
            await deps.journal.append_step(
                state.run_id, state.seq, "tool_result", refused, deps.clock.time(), key=tool_id
            )
            return refused
        state.seq += 1
        await deps.journal.append_step(
            state.run_id,
            state.seq,
            "tool_start",
            {"name": tool_use.get("name"), "input": tool_use.get("input")},
            deps.clock.time(),
            key=tool_id,
        )
        self._progress()
        ctx = self._tool_context(state, tool_id)
        span = deps.tracer.start(
            f"execute_tool {name}",
            parent=state.span,
            attributes={
                GenAI.OPERATION: "execute_tool",
                GenAI.TOOL_NAME: name,
                GenAI.TOOL_CALL_ID: tool_id,
                GenAI.TOOL_TYPE: "function",
            },
        )
        span.set_content(GenAI.TOOL_ARGUMENTS, tool_use.get("input") or {})
        ctx = replace(ctx, trace=span.carrier())
        # waiting on a colleague or the founder's answer (ask_founder) is not being stuck
        family = self._toolbox.family(name)
        colleague = family in ("colleagues", "founder")
        self._colleague_waits += colleague
        result: ToolResultBlock
        try:
            if family == "founder" and self._toolbox.is_idempotent(name):
                # ask_founder waits for the founder: a stop is a checkpoint there, as for an
                # approval — the resumed run asks again and finds the same question
                asked = await race(self._toolbox.call(tool_use, ctx), self._stop.wait())
                if asked.index == 1:
                    raise Stopping
                result = asked.result()
            else:
                result = await self._toolbox.call(tool_use, ctx)
        except BaseException as exc:
            span.fail(type(exc).__name__, str(exc))
            raise
        else:
            if result.get("is_error"):
                span.fail("tool_error")
            span.set_content(GenAI.TOOL_RESULT, result.get("content"))
        finally:
            self._colleague_waits -= colleague
            span.end()
        self._progress()
        state.seq += 1
        await deps.journal.append_step(
            state.run_id, state.seq, "tool_result", result, deps.clock.time(), key=tool_id
        )
        return result

    def _tool_context(self, state: RunState, tool_id: str) -> ToolCallContext:
        max_seconds = self.config.limits.max_seconds
        return ToolCallContext(
            agent=self.slug,
            run_id=state.run_id,
            task_id=state.task.id,
            consult_chain=state.task.consult_chain,
            tool_use_id=tool_id,
            routine=state.task.routine,
            run_seconds_left=(
                None
                if max_seconds is None
                else max_seconds - (self.deps.clock.monotonic() - state.breaker.started)
            ),
        )

    async def _rejoin_tool(self, state: RunState, tool_use: ToolUseBlock) -> ToolResultBlock:
        """The result of a started non-idempotent call a stop interrupted: what its tool's
        ``rejoin`` waits for (a consultation or delegation: the colleague's task, kept in
        the journal across the restart), else "outcome unknown" — never a second call.
        """
        tid, name = str(tool_use["id"]), str(tool_use["name"])
        colleague = self._toolbox.family(name) == "colleagues"
        self._colleague_waits += colleague  # waiting on a colleague is not being stuck
        try:
            result = await self._toolbox.rejoin(tool_use, self._tool_context(state, tid))
        finally:
            self._colleague_waits -= colleague
        self._progress()
        return result if result is not None else unknown_outcome_result(tid, name)

    def _needs_approval(self, name: str) -> bool:
        """Whether a call of ``name`` waits for the founder: listed in ``require_approval``
        (the agent's or the defaults'), else not listed in ``allow_without_approval`` and
        asking by itself (an MCP tool's annotations under its server's ``risk``).
        """
        if name in self.config.require_approval:
            return True
        if name in self.config.tools.allow_without_approval:
            return False
        return self._toolbox.needs_approval(name)

    async def _rate_refusal(self, tool_use: ToolUseBlock, limit: int) -> ToolResultBlock | None:
        """None if the call may run under ``tools.rate_limit`` (it is counted now), else
        the refusal the model sees.
        """
        limits = self.deps.rate_limits
        if limits is None:
            return None
        why = await limits.take(self.slug, str(tool_use.get("name")), limit)
        if why is None:
            return None
        return {
            "type": "tool_result",
            "tool_use_id": str(tool_use.get("id")),
            "is_error": True,
            "content": why,
        }

    async def _founder_approval(
        self, state: RunState, tool_use: ToolUseBlock
    ) -> ToolResultBlock | None:
        """Wait for the founder to approve this call: None if approved, else the tool
        error the model sees. A stop request ends the wait (:class:`Stopping`); the item
        stays on the desk and the resumed run finds it.
        """
        if self._gate is None:
            return {
                "type": "tool_result",
                "tool_use_id": str(tool_use.get("id")),
                "is_error": True,
                "content": "rejected: this tool needs the founder's approval, and there is no "
                "founder's desk in this process (a one-off `companyd ask` without a daemon)",
            }
        last = state.messages[-1] if state.messages else None
        said = last["content"] if last and last["role"] == "assistant" else ""
        reason = said if isinstance(said, str) else text_of(said)
        item = await self._gate.ask(
            tool_use, run_id=state.run_id, routine=state.task.routine, reason=reason
        )
        if item.pending:
            clock = self.deps.clock
            if self._founder_waits == 0:
                self._founder_since = clock.monotonic()
            self._founder_waits += 1
            try:
                finished = await race(self._gate.wait(item), self._stop.wait())
                if finished.index == 1:
                    raise Stopping
                item = finished.future.result()
            finally:
                self._founder_waits -= 1
                if self._founder_waits == 0:
                    # the founder's time is not the run's: max_seconds counts without it
                    state.breaker.started += clock.monotonic() - self._founder_since
                self._progress()
        # the decision goes into the run's transcript (who decided, when); a run resumed
        # between this step and the call journals it again, read as one by the transcript
        state.seq += 1
        await self.deps.journal.append_step(
            state.run_id,
            state.seq,
            "approval",
            {
                "name": str(tool_use.get("name")),
                "input": dict(tool_use.get("input") or {}),
                "item": item.id,
                "state": str(item.state),
                "asked": item.created,
                "decided": item.decided,
                "decided_by": item.decided_by,
                "via": item.via,
                "text": item.text,
            },
            self.deps.clock.time(),
            key=str(tool_use.get("id")),
        )
        return self._gate.refusal(tool_use, item)

    # -- resume -----------------------------------------------------------------------------

    def _replay(self, state: RunState, steps: Sequence[Step]) -> None:
        """Rebuild the conversation and the breaker's counters from journaled steps.

        If the last model response asked for tools whose results are not all journaled,
        they are left in ``state.pending`` for :meth:`_complete_pending_tools`.
        """
        results = {s.key: s.tool_result() for s in steps if s.kind == "tool_result" and s.key}
        started = {s.key for s in steps if s.kind == "tool_start" and s.key}
        state.seq = steps[-1].seq if steps else 0
        for s in steps:
            if s.kind == "verification":
                follow_up = s.payload.get("follow_up")
                if isinstance(follow_up, str) and follow_up:
                    # the answer did not hold and the agent was told so: that is its next turn
                    state.messages.append({"role": "user", "content": follow_up})
                    state.verify_retries += 1
                    state.unverified = str(s.payload.get("reason") or "") or None
                state.verified = s.payload.get("met") is True
                continue
            if s.kind != "llm":
                continue
            p = s.llm()
            state.last_stop = str(p.get("stop_reason") or "")
            usage = Usage(**p["usage"])
            state.account(p["model"], usage, Decimal(p["cost"]), bool(p["offline"]))
            content = p["content"]
            state.messages.append({"role": "assistant", "content": content})
            state.unverified = None
            # tools run only after a tool_use stop, as in _execute: a tool_use block cut
            # off by max_tokens is never run ("": a step journaled without its stop reason)
            uses = tool_uses_of(content) if state.last_stop in ("tool_use", "") else []
            if not uses:
                state.answer = text_of(content)
                continue
            state.pending = [
                PendingTool(
                    tool_use=u,
                    result=results.get(str(u["id"])),
                    started=str(u["id"]) in started,
                )
                for u in uses
            ]
            done = [p.result for p in state.pending if p.result is not None]
            if len(done) == len(state.pending):
                state.messages.append({"role": "user", "content": done})
                state.pending = []

    async def _complete_pending_tools(self, state: RunState) -> str | None:
        """Finish what a crash interrupted.

        Tool calls with a journaled result keep it; calls that never started, or whose tool
        is idempotent, run (again); a non-idempotent call that started without a result
        waits for what it started if its tool can (a colleague's task the restart kept:
        :meth:`_rejoin_tool`), else gets an "outcome unknown" result — no second tweet.
        If the journal ends with a final answer, the run had finished in all but its
        verification and outcome row: its stop reason is returned (the run ends as it
        says, once verified); a turn the model paused (``pause_turn``) is continued.
        """
        if not state.pending:
            last = state.messages[-1]
            if last["role"] == "assistant" and state.last_stop != "pause_turn":
                return state.last_stop
            return None
        deps = self.deps
        results: list[ToolResultBlock] = []
        for p in state.pending:
            tid, name = str(p.tool_use["id"]), str(p.tool_use["name"])
            if p.result is not None:
                results.append(p.result)
            elif p.started and not self._toolbox.is_idempotent(name):
                r = await self._rejoin_tool(state, p.tool_use)
                state.seq += 1
                await deps.journal.append_step(
                    state.run_id, state.seq, "tool_result", r, deps.clock.time(), key=tid
                )
                results.append(r)
            else:
                results.append(await self._run_tool(state, p.tool_use))
        state.messages.append({"role": "user", "content": results})
        state.pending = []
        return None

    # -- verification -----------------------------------------------------------------------

    async def _verify(self, state: RunState) -> tuple[bool, str | None]:
        """Check the final answer against the run's journaled steps (its task's
        ``done_when`` and the claim check; docs/agents.md, "Verification").

        Returns ``(retry, unmet)``: ``(True, None)`` after sending the one follow-up
        ``on_unmet: retry`` allows (journaled: a resumed run replays it); else ``unmet`` is
        why the run is unverified, in plain words, or None when the answer holds (or there
        is nothing to check). Each verdict is
        journaled as a ``verification`` step (``companyd runs show``).
        """
        task = state.task
        claim_check = self.config.claim_check
        if not task.done_when and not claim_check:
            return False, None
        deps = self.deps
        steps = await deps.journal.steps(state.run_id)
        verdict = evaluate(
            task.done_when,
            state.answer,
            calls_of(steps),
            tools=list(self._toolbox.tools),
            claim_check=claim_check,
        )
        if not verdict.checks:
            return False, None  # no conditions, and the answer claims nothing: no step
        retry = (
            not verdict.met and task.on_unmet == "retry" and state.verify_retries < VERIFY_RETRIES
        )
        follow_up = verdict.follow_up() if retry else None
        state.seq += 1
        await deps.journal.append_step(
            state.run_id,
            state.seq,
            "verification",
            verdict.payload(attempt=state.verify_retries + 1, follow_up=follow_up),
            deps.clock.time(),
        )
        if follow_up is not None:
            log.info(
                "agent %s: run %s unverified (%s); one follow-up sent",
                self.slug,
                state.run_id,
                verdict.reason,
            )
            state.messages.append({"role": "user", "content": follow_up})
            state.verify_retries += 1
            state.unverified = verdict.reason
            return True, None
        state.verified = verdict.met
        return False, None if verdict.met else verdict.reason

    # -- prompts ----------------------------------------------------------------------------

    def _task_message(self, task: Task) -> str:
        tz = ZoneInfo(self.deps.staff.timezone)
        when = datetime.fromtimestamp(task.created, tz).strftime("%Y-%m-%d %H:%M %Z")
        origin = {
            "operator": "the founder",
        }.get(task.source, task.source.replace("routine:", "routine ").replace("agent:", ""))
        parts = [f"Task {task.id} from {origin}, {when}:", task.prompt]
        if task.expected_output:
            parts.append(f"Expected output: {task.expected_output}")
        if task.consult_chain:
            parts.append(
                "You are being consulted by "
                + " → ".join(task.consult_chain)
                + ". Answer the question directly."
            )
        return "\n\n".join(parts)
