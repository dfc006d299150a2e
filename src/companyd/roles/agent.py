"""One role agent: a supervised child that runs tasks from its mailbox, one at a time.

An :class:`Agent` is created by its supervisor each time it starts and owns nothing that
must outlive it: its mailbox, pause state and waiting callers live in
:class:`~companyd.roles.staff.Staff`, its progress in the :class:`~companyd.roles.journal.Journal`.
So a restart is cheap and safe: the new instance resumes the unfinished run from its last
journaled step and carries on with the mailbox.

A run is the tool-use loop — system prompt (instructions + company context) and tools as
the cacheable prefix, the task as the first user message, then model call → tool calls →
model call … until the model ends its turn — wrapped in the defences against failures that
do not raise (seeds/001 lists them):

* **runaway cost** — each call reserves its worst case against the budgets first
  (:class:`~companyd.spend.SpendBook`); a refusal ends the run ``budget_exhausted`` and
  pauses the agent;
* **loops and endless runs** — the per-run :class:`~companyd.roles.breaker.Breaker`;
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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from companyd._fs import DiskAlarm, is_disk_failure
from companyd.config import AgentConfig
from companyd.daemon.child import ChildContext
from companyd.roles.breaker import Breaker, BreakerTripped
from companyd.roles.journal import JournaledRun, Step, TaskState
from companyd.roles.model import (
    ModelAuthFailed,
    ModelBadRequest,
    ModelError,
    ModelRequest,
    ModelResponse,
    SpendLimitReached,
    Usage,
    estimate_input_tokens,
)
from companyd.roles.staff import InjectedCrash
from companyd.roles.tasks import RunOutcome, RunStatus, Task, new_id
from companyd.roles.tools import ToolBox, ToolCallContext, unknown_outcome_result

if TYPE_CHECKING:
    from companyd.roles.staff import Staff

__all__ = ["QUARANTINE_AFTER", "STOP_CALL_GRACE", "Agent", "HeartbeatTimeout"]

log = logging.getLogger(__name__)

#: A task that made its agent crash this many times is quarantined.
QUARANTINE_AFTER = 2
#: Runs a task gets when a reviewer keeps rejecting it.
MAX_REVIEW_ATTEMPTS = 2


class HeartbeatTimeout(Exception):
    """A run made no progress for ``heartbeat_seconds``: the agent crashes on purpose."""


class _RunEnded(Exception):
    """Ends a run early with a status other than ok."""

    def __init__(self, status: RunStatus, reason: str | None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


#: Seconds a model call in flight when a stop begins may still take to answer; after that it
#: is cancelled (and its worst case kept as spent: it may have been billed).
STOP_CALL_GRACE = 3.0


class _Stopping(Exception):
    """The supervisor asked the agent to stop; the run stays journaled to resume later."""


@dataclass
class _PendingTool:
    tool_use: Mapping[str, Any]
    result: dict[str, Any] | None
    started: bool


@dataclass
class _RunState:
    task: Task
    run_id: str
    attempt: int
    started_wall: float
    messages: list[dict[str, Any]]
    breaker: Breaker
    seq: int = 0
    cost: Decimal = Decimal(0)
    usage: Usage = field(default_factory=Usage)
    models: list[str] = field(default_factory=list)
    offline: bool = False
    answer: str = ""
    pending: list[_PendingTool] = field(default_factory=list)
    #: stop_reason of the last journaled model response (rebuilt on resume)
    last_stop: str = ""
    #: why the task was withdrawn (its asker stopped waiting), once it is
    withdrawn: str | None = None
    withdrawn_signal: asyncio.Event = field(default_factory=asyncio.Event)

    def withdraw(self, reason: str) -> None:
        """Nobody waits for this run's outcome any more: its agent cancels it now."""
        if self.withdrawn is None:
            self.withdrawn = reason
        self.withdrawn_signal.set()


class Agent:
    """One agent instance (a new one per supervisor start).

    Args:
        config: the agent's resolved configuration.
        staff: the company's agents (mailboxes, dependencies, routing).
    """

    def __init__(self, config: AgentConfig, staff: Staff) -> None:
        self.config = config
        self.slug = config.slug
        self.staff = staff
        self._last_progress = staff.clock.monotonic()
        self._toolbox = ToolBox()
        self._current: _RunState | None = None
        self._ctx: ChildContext | None = None
        #: consult/delegate calls in flight: waiting on a colleague is not being stuck
        self._colleague_waits = 0

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self, ctx: ChildContext) -> None:
        """The supervised child body: report started, open tools, resume, then serve the
        mailbox."""
        staff = self.staff
        self._ctx = ctx
        async with contextlib.AsyncExitStack() as stack:
            # Started before the tool servers' handshakes: agents start one after another,
            # and a few slow or mute servers must not hold up the company (READY=1 and
            # systemd's start timeout). Tasks wait in the mailbox until the tools are in.
            ctx.started()
            self._toolbox = await staff.toolbox_for(self.config, stack)
            try:
                unfinished_runs = await staff.journal.unfinished_runs(self.slug)
            except Exception as exc:
                if not is_disk_failure(exc):
                    raise
                # The journal cannot be opened (a full state disk at start): the runs
                # resume at the next start; the agent waits (paused) instead of crashing.
                log.error("agent %s: cannot read its unfinished runs: %s", self.slug, exc)
                unfinished_runs = []
            for unfinished in unfinished_runs:
                if ctx.stopping.is_set() or staff.draining.is_set():
                    return
                await self._resume(unfinished, ctx)
                self._crash_if_asked(ctx)
            while not ctx.stopping.is_set():
                task = await staff.next_task(self.slug, ctx.stopping)
                if task is None:
                    return
                await self._serve(task, ctx)
                self._crash_if_asked(ctx)

    def _crash_if_asked(self, ctx: ChildContext) -> None:
        """A crash asked for while a run was busy happens before its next step, or, if the
        run ended first (its last step was in flight), now that its outcome is recorded:
        never left waiting for a run that may not come (``debug crash`` said it crashed)."""
        if not (ctx.stopping.is_set() or self.staff.draining.is_set()):
            self.staff.take_injected_crash(self.slug)

    async def _serve(self, task: Task, ctx: ChildContext) -> None:
        """Run one task from the mailbox to an outcome (or until a stop request)."""
        attempt = await self.staff.journal.attempts(task.id) + 1
        state = self._new_state(task, new_id("run"), attempt)
        try:
            await self.staff.journal.start_run(task, state.run_id, attempt, state.started_wall)
        except Exception as exc:
            if not is_disk_failure(exc):
                raise
            await self._state_disk_failed(state, exc)
            return
        self.staff.bus.emit(
            "run_started",
            f"agent/{self.slug}",
            agent=self.slug,
            task_id=task.id,
            run_id=state.run_id,
            routine=task.routine,
        )
        await self._guarded(state, ctx, resumed=False)

    async def _resume(self, jr: JournaledRun, ctx: ChildContext) -> None:
        state = self._new_state(jr.task, jr.run_id, jr.attempt)
        state.started_wall = jr.started
        self._replay(state, jr.steps)
        log.info(
            "agent %s resumes run %s of task %s from step %d",
            self.slug,
            jr.run_id,
            jr.task.id,
            state.breaker.steps,
        )
        self.staff.bus.emit(
            "run_started",
            f"agent/{self.slug}",
            agent=self.slug,
            task_id=jr.task.id,
            run_id=jr.run_id,
            routine=jr.task.routine,
            resumed_at_step=state.breaker.steps,
        )
        await self._guarded(state, ctx, resumed=True)

    def _new_state(self, task: Task, run_id: str, attempt: int) -> _RunState:
        return _RunState(
            task=task,
            run_id=run_id,
            attempt=attempt,
            started_wall=self.staff.clock.time(),
            messages=[{"role": "user", "content": self._task_message(task)}],
            breaker=Breaker(self.config.limits, self.staff.clock.monotonic()),
        )

    # -- the guarded run: heartbeat, crash accounting, outcome ------------------------------

    async def _guarded(self, state: _RunState, ctx: ChildContext, *, resumed: bool) -> None:
        staff = self.staff
        self._current = state
        staff.run_started(self.slug, state)
        self._progress()
        work = asyncio.create_task(self._execute(state, ctx, resumed=resumed))
        try:
            overrun = await self._watch_heartbeat(work, state)
            status, reason = overrun or work.result()
        except _Stopping:
            return  # journaled as running; resumed on the next start
        except InjectedCrash:
            raise  # a test's or the chaos benchmark's crash: not the task's fault
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit) or _stopped_from_outside(exc):
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
            crashes = await staff.journal.record_crash(state.task.id, error, staff.clock.time())
            if crashes >= QUARANTINE_AFTER:
                await self._quarantine(state, crashes)
            raise
        finally:
            self._current = None
            staff.run_ended(self.slug)
            if not work.done():
                await _cancel_and_reap(work, self.slug)
        if status is RunStatus.OK and state.task.reviewer and self.slug != state.task.reviewer:
            verdict = await staff.review(state.task, state.answer, self.slug)
            if verdict is not None:
                status, reason = RunStatus.FAILED, f"rejected by {state.task.reviewer}: {verdict}"
        await self._finish(state, status, reason)

    async def _watch_heartbeat(
        self, work: asyncio.Task[tuple[RunStatus, str | None]], state: _RunState
    ) -> tuple[RunStatus, str | None] | None:
        """Wait for ``work``; raise :class:`HeartbeatTimeout` on a stall. A run still busy
        (in a model or tool call) at ``max_seconds`` is cancelled there and ends
        ``circuit_breaker`` (returned), rather than at the next step's check; a run whose
        task is withdrawn (:meth:`Staff.withdraw`) is cancelled at once and ends
        ``cancelled``."""
        clock = self.staff.clock
        limit = self.config.heartbeat_seconds
        max_seconds = self.config.limits.max_seconds
        while not work.done():
            if state.withdrawn is not None:
                await _cancel_and_reap(work, self.slug)
                return RunStatus.CANCELLED, f"withdrawn: {state.withdrawn}"
            now = clock.monotonic()
            run_left = (
                max_seconds - (now - state.breaker.started) if max_seconds is not None else None
            )
            if run_left is not None and run_left <= 0:
                await _cancel_and_reap(work, self.slug)
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
                await _cancel_and_reap(work, self.slug)
                raise HeartbeatTimeout(
                    f"run made no progress for {limit:g} s (heartbeat_seconds); "
                    "cancelled and the agent crashed so its supervisor restarts it"
                )
            wait = remaining if run_left is None else min(remaining, run_left)
            sleeper = asyncio.ensure_future(clock.sleep(wait))
            withdrawn = asyncio.ensure_future(state.withdrawn_signal.wait())
            try:
                await asyncio.wait({work, sleeper, withdrawn}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                withdrawn.cancel()
        return None

    def _progress(self) -> None:
        self._last_progress = self.staff.clock.monotonic()

    async def _quarantine(self, state: _RunState, crashes: int) -> None:
        staff = self.staff
        got = await staff.journal.get_task(state.task.id)
        errors = got[3] if got else []
        outcome = self._outcome(
            state,
            RunStatus.QUARANTINED,
            f"quarantined after {crashes} crashes: {errors[-1] if errors else 'unknown error'}",
        )
        await staff.journal.finish_run(outcome, TaskState.QUARANTINED)
        staff.bus.emit(
            "task_quarantined",
            f"agent/{self.slug}",
            agent=self.slug,
            task_id=state.task.id,
            run_id=state.run_id,
            routine=state.task.routine,
            crashes=crashes,
            errors=errors[-QUARANTINE_AFTER:],
            prompt=state.task.prompt[:200],
        )
        staff.finished(outcome)

    async def _state_disk_failed(self, state: _RunState, exc: BaseException) -> None:
        """A ledger or journal write failed on the disk: the run fails with the reason, the
        agent is paused, one ``state_disk_full`` alert is raised (shared by every writer)."""
        staff = self.staff
        reason = (
            f"state disk full: writes failing ({type(exc).__name__}: {exc}); free space on "
            f"the state disk, then `companyd resume {self.slug}`"
        )
        log.error("agent %s: run %s failed: %s", self.slug, state.run_id, reason)
        DiskAlarm.of(staff.bus).failed("run journal or ledger", staff.state_dir, exc)
        staff.pause(self.slug, reason)
        await self._finish(state, RunStatus.FAILED, reason)

    async def _finish(self, state: _RunState, status: RunStatus, reason: str | None) -> None:
        staff = self.staff
        outcome = self._outcome(state, status, reason)
        try:
            await staff.journal.finish_run(outcome, TaskState.DONE)
        except Exception as exc:
            if not is_disk_failure(exc):
                raise
            # The run stays open in the journal and is resumed at the next start; its
            # outcome still reaches the events and whoever waits for it.
            log.error("agent %s: run %s not journaled: %s", self.slug, state.run_id, exc)
            DiskAlarm.of(staff.bus).failed("run journal", staff.journal.path, exc)
            if "writes failing" not in (reason or ""):
                staff.pause(self.slug, f"state disk full: writes failing ({exc})")
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
            staff.bus.emit("run_finished", src, status=str(status), **common)
        else:
            staff.bus.emit("run_failed", src, status=str(status), reason=reason, **common)
        if status is RunStatus.FAILED and reason and reason.startswith("rejected by"):
            attempts = await staff.journal.attempts(state.task.id)
            if attempts < MAX_REVIEW_ATTEMPTS:
                # a rejected result is a failed attempt: try once more with the feedback
                retry = replace(
                    state.task,
                    prompt=f"{state.task.prompt}\n\nA previous attempt was {reason}. "
                    "Address that feedback.",
                )
                staff.requeue(retry)
                return
        staff.finished(outcome)

    def _outcome(self, state: _RunState, status: RunStatus, reason: str | None) -> RunOutcome:
        return RunOutcome(
            task_id=state.task.id,
            run_id=state.run_id,
            agent=self.slug,
            status=status,
            started=state.started_wall,
            ended=self.staff.clock.time(),
            reason=reason,
            answer=state.answer,
            cost_usd=float(state.cost),
            steps=state.breaker.steps,
            tokens=state.usage.total_tokens,
            models=tuple(dict.fromkeys(state.models)),
            offline=state.offline,
        )

    # -- the tool-use loop ------------------------------------------------------------------

    async def _execute(
        self, state: _RunState, ctx: ChildContext, *, resumed: bool
    ) -> tuple[RunStatus, str | None]:
        """Run the loop to an end. Returns (status, reason); raises _Stopping on a stop
        request, anything else on a crash."""
        try:
            if resumed:
                await self._complete_pending_tools(state)
            while True:
                if ctx.stopping.is_set() or self.staff.draining.is_set():
                    raise _Stopping
                self.staff.take_injected_crash(self.slug)
                state.breaker.check(self.staff.clock.monotonic())
                response = await self._step(state)
                if response.stop_reason == "tool_use" and response.tool_uses:
                    await self._run_tools(state, response.tool_uses)
                    continue
                if response.stop_reason == "pause_turn":
                    continue
                state.answer = response.text
                return _turn_ended(response.stop_reason)
        except BreakerTripped as exc:
            self._breaker_event(state, exc)
            return RunStatus.CIRCUIT_BREAKER, str(exc)
        except _RunEnded as exc:
            return exc.status, exc.reason

    def _breaker_event(self, state: _RunState, exc: BreakerTripped) -> None:
        self.staff.bus.emit(
            "circuit_breaker",
            f"agent/{self.slug}",
            agent=self.slug,
            task_id=state.task.id,
            run_id=state.run_id,
            routine=state.task.routine,
            limit=exc.limit,
            reason=str(exc),
        )

    async def _step(self, state: _RunState) -> ModelResponse:
        """One model call (with fallback), settled and journaled before returning."""
        staff = self.staff
        base = ModelRequest(
            model=self.config.model.primary,
            system=staff.system_prompt(self.config),
            messages=list(state.messages),
            tools=self._toolbox.definitions(),
            max_tokens=self.config.model.max_output_tokens,
            metadata={"agent": self.slug, "run_id": state.run_id, "step": state.breaker.steps},
        )
        response, cost = await self._call_with_fallback(state, base)
        self._progress()
        state.seq += 1
        await staff.journal.append_step(
            state.run_id,
            state.seq,
            "llm",
            _llm_payload(response, cost),
            staff.clock.time(),
            paid=True,
        )
        self._account(state, response.model, response.usage, cost, response.offline)
        state.messages.append({"role": "assistant", "content": list(response.content)})
        await staff.journal.update_run_totals(
            state.run_id,
            cost=str(state.cost),
            steps=state.breaker.steps,
            models=state.models,
            offline=state.offline,
        )
        return response

    async def _journal_paid(
        self, state: _RunState, response: ModelResponse, exc: BaseException
    ) -> None:
        """Journal the step of a paid call whose ledger row the state disk refused (its
        cost counts in memory and is recorded when space returns)."""
        cost = getattr(exc, "held_cost", None)
        state.seq += 1
        try:
            await self.staff.journal.append_step(
                state.run_id,
                state.seq,
                "llm",
                _llm_payload(response, cost if isinstance(cost, Decimal) else Decimal(0)),
                self.staff.clock.time(),
                paid=True,
            )
        except Exception as journal_exc:
            if not is_disk_failure(journal_exc):
                raise
            # held by the journal and written once the disk takes writes again

    def _account(
        self, state: _RunState, model: str, usage: Usage, cost: Decimal, offline: bool
    ) -> None:
        state.breaker.add_step(usage.total_tokens, cost)
        state.cost += cost
        state.usage = state.usage + usage
        state.models.append(model)
        state.offline = state.offline or offline

    async def _call_with_fallback(
        self, state: _RunState, base: ModelRequest
    ) -> tuple[ModelResponse, Decimal]:
        staff = self.staff
        chain = self.config.model.chain
        failures: list[str] = []
        for i, model in enumerate(chain):
            request = replace(base, model=model)
            call = _BudgetedCall(self, state, request)
            try:
                await call.reserve()
                self._progress()
                response = await call.send()
                try:
                    cost = await call.settle(response)
                except Exception as exc:
                    if is_disk_failure(exc):
                        # Paid for, but the ledger holds its row: journal the step anyway
                        # (held too if the journal is refused), so nothing pays for it twice.
                        await self._journal_paid(state, response, exc)
                    raise
                return response, cost
            except staff.budget_exhausted_error as exc:
                # the first attempt or a retry was refused: paused like any budget refusal
                staff.pause(self.slug, f"budget: {exc}", budget=True)
                raise _RunEnded(RunStatus.BUDGET_EXHAUSTED, str(exc)) from None
            except SpendLimitReached as exc:
                staff.api_spend_limit(str(exc))
                raise _RunEnded(
                    RunStatus.BUDGET_EXHAUSTED,
                    f"the Anthropic organisation's API spend limit is reached: {exc}",
                ) from None
            except ModelAuthFailed as exc:
                # Not this task's fault and not worth another model: stop every agent once.
                staff.api_key_refused(str(exc))
                raise _RunEnded(RunStatus.FAILED, str(exc)) from None
            except ModelBadRequest:
                raise  # our request is wrong: crash (a poison input ends in quarantine)
            except ModelError as exc:
                if not exc.retryable:
                    raise
                if self._stop_requested():
                    raise _Stopping from None  # no fallback either once a stop has begun
                failures.append(f"{model}: {type(exc).__name__}: {exc}")
                self._progress()
                if i + 1 < len(chain):
                    staff.bus.emit(
                        "model_fallback",
                        f"agent/{self.slug}",
                        agent=self.slug,
                        run_id=state.run_id,
                        from_model=model,
                        to_model=chain[i + 1],
                        reason=f"{type(exc).__name__}: {exc}",
                    )
        raise _RunEnded(RunStatus.FAILED, "every model in the chain failed: " + "; ".join(failures))

    def _stop_requested(self) -> bool:
        ctx = self._ctx
        return self.staff.draining.is_set() or (ctx is not None and ctx.stopping.is_set())

    async def _stop_signal(self) -> None:
        """Return once a stop of this agent or of the daemon has begun."""
        waits = [asyncio.ensure_future(self.staff.draining.wait())]
        if self._ctx is not None:
            waits.append(asyncio.ensure_future(self._ctx.stopping.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _run_tools(self, state: _RunState, tool_uses: Sequence[Mapping[str, Any]]) -> None:
        """Run the tool calls of one response (concurrently; the model asked for them
        together), journaling each start and result, then append the results turn.

        If one call raises (a crash), the others are cancelled and awaited before the error
        propagates: no tool call outlives the run that started it (an orphan would finish
        its effect after the restarted agent re-ran or wrote off the same call)."""
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

    async def _run_tool(self, state: _RunState, tool_use: Mapping[str, Any]) -> dict[str, Any]:
        staff = self.staff
        tool_id = str(tool_use.get("id"))
        state.seq += 1
        await staff.journal.append_step(
            state.run_id,
            state.seq,
            "tool_start",
            {"name": tool_use.get("name"), "input": tool_use.get("input")},
            staff.clock.time(),
            key=tool_id,
        )
        self._progress()
        ctx = ToolCallContext(
            agent=self.slug,
            run_id=state.run_id,
            task_id=state.task.id,
            consult_chain=state.task.consult_chain,
        )
        colleague = self._toolbox.family(str(tool_use.get("name"))) == "colleagues"
        self._colleague_waits += colleague
        try:
            result = await self._toolbox.call(tool_use, ctx)
        finally:
            self._colleague_waits -= colleague
        self._progress()
        state.seq += 1
        await staff.journal.append_step(
            state.run_id, state.seq, "tool_result", result, staff.clock.time(), key=tool_id
        )
        return result

    # -- resume -----------------------------------------------------------------------------

    def _replay(self, state: _RunState, steps: Sequence[Step]) -> None:
        """Rebuild the conversation and the breaker's counters from journaled steps.

        If the last model response asked for tools whose results are not all journaled,
        they are left in ``state.pending`` for :meth:`_complete_pending_tools`.
        """
        results = {s.key: s.payload for s in steps if s.kind == "tool_result" and s.key}
        started = {s.key for s in steps if s.kind == "tool_start" and s.key}
        state.seq = steps[-1].seq if steps else 0
        for s in steps:
            if s.kind != "llm":
                continue
            p = s.payload
            state.last_stop = str(p.get("stop_reason") or "")
            usage = Usage(**p["usage"])
            self._account(state, p["model"], usage, Decimal(p["cost"]), bool(p["offline"]))
            content = p["content"]
            state.messages.append({"role": "assistant", "content": content})
            # tools run only after a tool_use stop, as in _execute: a tool_use block cut
            # off by max_tokens is never run ("": a step journaled without its stop reason)
            uses = (
                [b for b in content if b.get("type") == "tool_use"]
                if state.last_stop in ("tool_use", "")
                else []
            )
            if not uses:
                state.answer = "".join(
                    b.get("text", "") for b in content if b.get("type") == "text"
                )
                continue
            state.pending = [
                _PendingTool(
                    tool_use=u,
                    result=results.get(str(u["id"])),
                    started=str(u["id"]) in started,
                )
                for u in uses
            ]
            if all(p.result is not None for p in state.pending):
                state.messages.append(
                    {"role": "user", "content": [p.result for p in state.pending]}
                )
                state.pending = []

    async def _complete_pending_tools(self, state: _RunState) -> None:
        """Finish what a crash interrupted.

        Tool calls with a journaled result keep it; calls that never started, or whose tool
        is idempotent, run (again); a non-idempotent call that started without a result gets
        an "outcome unknown" result instead — no second tweet. If the journal ends with a
        final answer, the run had finished in all but its outcome row, and ends as that
        answer's stop reason says; a turn the model paused (``pause_turn``) is continued.
        """
        if not state.pending:
            last = state.messages[-1]
            if last["role"] == "assistant" and state.last_stop != "pause_turn":
                raise _RunEnded(*_turn_ended(state.last_stop))
            return
        staff = self.staff
        results: list[dict[str, Any]] = []
        for p in state.pending:
            tid, name = str(p.tool_use["id"]), str(p.tool_use["name"])
            if p.result is not None:
                results.append(p.result)
            elif p.started and not self._toolbox.is_idempotent(name):
                r = unknown_outcome_result(tid, name)
                state.seq += 1
                await staff.journal.append_step(
                    state.run_id, state.seq, "tool_result", r, staff.clock.time(), key=tid
                )
                results.append(r)
            else:
                results.append(await self._run_tool(state, p.tool_use))
        state.messages.append({"role": "user", "content": results})
        state.pending = []

    # -- prompts ----------------------------------------------------------------------------

    def _task_message(self, task: Task) -> str:
        tz = ZoneInfo(self.staff.config.timezone)
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


class _BudgetedCall:
    """One model call of one agent on one model, each attempt (first try and every retry)
    budgeted on its own (issue 15, docs/spend.md):

    * an attempt is reserved at its worst case before it is sent; no attempt starts once a
      stop has begun (``STOPPING=1``);
    * an attempt that ends with an answer is settled at its real usage; one the provider
      answered with an error (529, 5xx, 429 …) is released: nothing was billed;
    * one that got no answer after it was sent — a timeout, a connection broken mid-call,
      a call cancelled in flight by a stop — is **forfeited**: its worst case stays spent
      for the budget period, since the provider may have processed and billed it.
    """

    def __init__(self, agent: Agent, state: _RunState, request: ModelRequest) -> None:
        self._agent = agent
        self._state = state
        self._request = request
        self._open: Any = None  # the open attempt's reservation (SpendPort's type)

    async def reserve(self) -> None:
        """Reserve the next attempt. A stop that begins meanwhile ends the wait for room in
        the budget (it can last minutes while other calls hold reservations) and the call."""
        a, state, request = self._agent, self._state, self._request
        if a._stop_requested():
            raise _Stopping
        reserving = asyncio.ensure_future(
            a.staff.spend.reserve(
                agent=a.slug,
                run_id=state.run_id,
                routine=state.task.routine,
                model=request.model,
                input_tokens=estimate_input_tokens(request),
                max_output_tokens=request.max_tokens,
            )
        )
        stop = asyncio.ensure_future(a._stop_signal())
        try:
            await asyncio.wait({reserving, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not reserving.done():
                await _cancel_and_reap(reserving, a.slug)  # the book undoes a cut reserve
        if reserving.cancelled():
            raise _Stopping
        self._open = reserving.result()
        if a._stop_requested():  # nothing was sent: give the money back
            res, self._open = self._open, None
            await asyncio.shield(a.staff.spend.release(res))
            raise _Stopping

    async def _close(self, exc: BaseException) -> None:
        """Settle the open attempt's reservation after ``exc`` ended it."""
        res, self._open = self._open, None
        if res is None:
            return
        spend = self._agent.staff.spend
        if isinstance(exc, ModelError) and exc.maybe_billed:
            await asyncio.shield(spend.forfeit(res, reason=f"{type(exc).__name__}: {exc}"))
        elif isinstance(exc, asyncio.CancelledError | _Stopping):
            await asyncio.shield(
                spend.forfeit(res, reason="cancelled while the request was in flight")
            )
        else:
            await asyncio.shield(spend.release(res))

    async def _before_retry(self, err: ModelError) -> None:
        await self._close(err)
        self._agent._progress()
        await self.reserve()

    async def send(self) -> ModelResponse:
        """The backend's answer. A stop that begins while the call is in flight gives it
        STOP_CALL_GRACE to answer, then cancels it (forfeited) and raises _Stopping."""
        staff = self._agent.staff
        call = asyncio.ensure_future(
            staff.backend.create(self._request, before_retry=self._before_retry)
        )
        stop = asyncio.ensure_future(self._agent._stop_signal())
        try:
            try:
                await asyncio.wait({call, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
            if not call.done():
                # A stop began while the request was in flight. An answer that comes within
                # STOP_CALL_GRACE is kept (settled and journaled: the run resumes after it);
                # a slow API is not waited out (its timeout times the attempts could hold
                # the stop for many seconds): the call is cancelled, and forfeited.
                grace = asyncio.ensure_future(staff.clock.sleep(STOP_CALL_GRACE))
                try:
                    await asyncio.wait({call, grace}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    grace.cancel()
            if not call.done():
                await _cancel_and_reap(call, self._agent.slug)
                raise _Stopping
            return call.result()
        except BaseException as exc:
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
            await self._close(exc)
            raise

    async def settle(self, response: ModelResponse) -> Decimal:
        res, self._open = self._open, None
        assert res is not None
        cost: Decimal = await self._agent.staff.spend.settle(
            res,
            model=response.model,
            usage=response.usage,
            request_id=response.request_id,
        )
        return cost


def _llm_payload(response: ModelResponse, cost: Decimal) -> dict[str, Any]:
    return {
        "model": response.model,
        "content": list(response.content),
        "stop_reason": response.stop_reason,
        "usage": response.usage.to_dict(),
        "cost": str(cost),
        "offline": response.offline,
        "request_id": response.request_id,
    }


def _stopped_from_outside(exc: BaseException) -> bool:
    """True if ``exc`` is a cancellation aimed at the current task (its supervisor stopping
    it), as opposed to a CancelledError its run raised on its own."""
    current = asyncio.current_task()
    return (
        isinstance(exc, asyncio.CancelledError) and current is not None and current.cancelling() > 0
    )


def _turn_ended(stop_reason: str) -> tuple[RunStatus, str | None]:
    """The outcome of a run whose model ended its turn with ``stop_reason``."""
    if stop_reason == "refusal":
        return RunStatus.FAILED, "the model refused the task"
    if stop_reason == "max_tokens":
        return RunStatus.OK, "answer truncated at max_output_tokens"
    return RunStatus.OK, None


async def _cancel_and_reap(work: asyncio.Task[Any], agent: str) -> None:
    """Cancel ``work`` and wait until it has ended, whatever it ends with. Only the work's
    own cancellation is absorbed: a cancellation aimed at the calling task (a supervisor
    stopping the agent) still propagates, so the caller can never swallow a stop."""
    work.cancel()
    try:
        await work
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:  # it failed while being cut short: the caller's outcome stands
        log.debug("agent %s: the cancelled step raised", agent, exc_info=True)
