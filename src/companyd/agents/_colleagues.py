"""Agent-to-agent work: consult, delegate, review — each with a timeout and a withdrawal.

* ``consult(agent, question)`` — only toward the agents in the asker's ``consult`` list,
  at most ``max_consult_depth`` deep, refusing cycles (A asks B asks A) with a clear tool
  error;
* ``delegate(agent, task)`` — a manager hands work to a direct report (several in
  parallel), optionally checked by a reviewer;
* reviews — a reviewer agent checks a result against the task's ``expected_output``.

Each is a task put in the colleague's mailbox through a :class:`Desk` (the staff), waited
for at most the asker's ``colleague_timeout_seconds`` of the injected clock. When the asker
stops waiting — the timeout, or its own run being cancelled — the task is withdrawn, so no
colleague works (and spends) for nobody.

A graceful stop of the daemon is not the asker giving up: a consultation or delegation in
flight is a checkpoint (the asking run stops at once, journaled as running), its task stays
in the journal, and after the restart the resumed asking run waits for the same task again
(:meth:`Colleagues.rejoin`) — so a colleague's run waiting for the founder's approval goes on
waiting for the same item, and its answer reaches the run that asked (docs/desk.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from companyd._aio import race
from companyd.agents._run import Stopping
from companyd.agents._tools import Tool, ToolCallContext, ToolError, json_schema
from companyd.clock import Clock
from companyd.config import AgentConfig, CompanyConfig
from companyd.runs import RunOutcome, RunStatus, Task, new_id

__all__ = ["DEFAULT_COLLEAGUE_TIMEOUT", "REVIEW", "Colleagues", "Desk", "withdrawn_at_restart"]

#: How long an agent waits for a colleague's answer unless its colleague_timeout_seconds
#: says otherwise (the schema's default).
DEFAULT_COLLEAGUE_TIMEOUT = 300.0

#: The id prefix of a review task (``review-…``). A restart withdraws every review left
#: open (the staff's start): the resumed worker asks for a new one.
REVIEW = "review"


def withdrawn_at_restart(task: Task) -> bool:
    """True if a restart withdraws ``task`` whatever became of it (a review): nothing its
    run does once the daemon's stop has begun is used.
    """
    return task.id.startswith(f"{REVIEW}-")


class Desk(Protocol):
    """Where colleagues' tasks are handed in (the staff)."""

    @property
    def config(self) -> CompanyConfig:
        """The running configuration (who reports to whom)."""
        ...

    async def submit(self, task: Task) -> RunOutcome:
        """Queue ``task`` and wait for its outcome."""
        ...

    def withdraw(self, task_id: str, reason: str) -> None:
        """Nobody waits for task ``task_id`` any more."""
        ...

    @property
    def draining(self) -> asyncio.Event:
        """Set when the daemon begins a graceful stop."""
        ...

    def resumed(self, task_id: str) -> Awaitable[RunOutcome] | None:
        """The outcome of task ``task_id`` a previous process left open, or None."""
        ...

    async def asked_task(self, run_id: str, tool_use_id: str) -> Task | None:
        """The task the tool call ``tool_use_id`` of run ``run_id`` asked for."""
        ...

    async def ended_outcome(self, task_id: str) -> RunOutcome | None:
        """How task ``task_id`` ended, as the journal recorded it; None if it has not."""
        ...


class Colleagues:
    """Consultations, delegations and reviews between the agents of one company.

    Args:
        desk: where the tasks go (the staff).
        clock: time source for the timeouts.
    """

    def __init__(self, desk: Desk, clock: Clock) -> None:
        self._desk = desk
        self._clock = clock

    def tools(self, agent: AgentConfig) -> list[Tool]:
        """The ``consult`` and ``delegate`` tools ``agent`` gets (if it may use them)."""
        tools: list[Tool] = []
        if agent.consult:

            async def consult(args: Mapping[str, Any], ctx: ToolCallContext) -> Any:
                return await self.consult(
                    agent, str(args.get("agent", "")), str(args.get("question", "")), ctx
                )

            async def consult_again(args: Mapping[str, Any], ctx: ToolCallContext) -> Any:
                outcome = await self.rejoin(agent, ctx)
                return None if outcome is None else _consulted(outcome)

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
                    rejoin=consult_again,
                )
            )
        reports = [a.slug for a in self._desk.config.agents.values() if a.reports_to == agent.slug]
        if reports:

            async def delegate(args: Mapping[str, Any], ctx: ToolCallContext) -> Any:
                return await self.delegate(agent, args, ctx)

            async def delegate_again(args: Mapping[str, Any], ctx: ToolCallContext) -> Any:
                outcome = await self.rejoin(agent, ctx)
                return None if outcome is None else _delegated(outcome)

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
                    rejoin=delegate_again,
                )
            )
        return tools

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
            created=self._clock.time(),
            consult_chain=chain,
            asked_by=ctx.run_id,
            asked_in=ctx.tool_use_id or None,
        )
        outcome = await self._wait(
            task, _waited_for(task), asker.colleague_timeout_seconds, checkpoint=True
        )
        return _consulted(outcome)

    async def delegate(
        self, manager: AgentConfig, args: Mapping[str, Any], ctx: ToolCallContext
    ) -> dict[str, Any]:
        """Hand a task to a direct report and wait for its outcome."""
        config = self._desk.config
        target = str(args.get("agent", ""))
        report = config.agents.get(target)
        if report is None or report.reports_to != manager.slug:
            reports = [a.slug for a in config.agents.values() if a.reports_to == manager.slug]
            raise ToolError(
                f"{target!r} is not a direct report of {manager.slug}; reports: "
                f"{', '.join(reports) or '(none)'}"
            )
        text = str(args.get("task", "")).strip()
        if not text:
            raise ToolError("delegate needs a non-empty 'task'")
        reviewer = args.get("reviewer")
        if reviewer is not None and reviewer not in config.agents:
            raise ToolError(
                f"reviewer {reviewer!r} is not an agent; agents: {', '.join(config.agents)}"
            )
        task = Task(
            id=new_id("task"),
            agent=target,
            prompt=text,
            source=f"agent:{manager.slug}",
            created=self._clock.time(),
            expected_output=(str(args["expected_output"]) if args.get("expected_output") else None),
            reviewer=str(reviewer) if reviewer else None,
            consult_chain=(*ctx.consult_chain, manager.slug),
            asked_by=ctx.run_id,
            asked_in=ctx.tool_use_id or None,
        )
        outcome = await self._wait(
            task, _waited_for(task), manager.colleague_timeout_seconds, checkpoint=True
        )
        return _delegated(outcome)

    async def rejoin(self, asker: AgentConfig, ctx: ToolCallContext) -> RunOutcome | None:
        """For ``asker``'s run resumed after a restart: wait again (a fresh
        ``colleague_timeout_seconds``) for the task its tool call ``ctx.tool_use_id`` asked
        for before the daemon stopped, as :meth:`consult` and :meth:`delegate` wait for a
        new one, or take the outcome it ended with meanwhile; None if the journal holds no
        such task or outcome (the call's outcome is then unknown to the run).
        """
        if not ctx.tool_use_id:
            return None
        task = await self._desk.asked_task(ctx.run_id, ctx.tool_use_id)
        if task is None:
            return None
        held = self._desk.resumed(task.id)
        if held is None:
            # it ended before this process held it (withdrawn at the start, or it ended just
            # before the previous process stopped): its recorded outcome, if it has one
            return await self._desk.ended_outcome(task.id)
        return await self._wait(
            task, _waited_for(task), asker.colleague_timeout_seconds, checkpoint=True, held=held
        )

    async def review(
        self, task: Task, answer: str, worker: str, run_id: str | None = None
    ) -> str | None:
        """Ask ``task.reviewer`` to check ``answer`` (the result of ``worker``'s run
        ``run_id``); None if approved, else the reason.

        Raises:
            Stopping: the daemon began a graceful stop: the worker's run stops here (a
                checkpoint; the restart withdraws the review, and the resumed run, whose
                journal ends with its answer, asks for a new one).
        """
        assert task.reviewer is not None
        expected = task.expected_output or "(not stated: judge whether the task was done)"
        review = Task(
            id=new_id(REVIEW),
            agent=task.reviewer,
            prompt=(
                f"Review the result {worker} produced for this task.\n\nTask: {task.prompt}\n\n"
                f"Expected output: {expected}\n\nResult:\n{answer}\n\n"
                "Reply with APPROVE or REJECT as the first word, then one sentence why."
            ),
            source=f"agent:{worker}",
            created=self._clock.time(),
            consult_chain=(*task.consult_chain, worker),
            asked_by=run_id,
        )
        asker = self._desk.config.agents.get(worker)
        timeout = asker.colleague_timeout_seconds if asker else DEFAULT_COLLEAGUE_TIMEOUT
        try:
            outcome = await self._wait(
                review, f"reviewer {task.reviewer} did not answer", timeout, checkpoint=True
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

    async def _wait(
        self,
        task: Task,
        what: str,
        timeout: float,
        *,
        checkpoint: bool = False,
        held: Awaitable[RunOutcome] | None = None,
    ) -> RunOutcome:
        """Submit ``task`` (or wait for ``held``, its outcome after a restart) and wait for
        its outcome, at most ``timeout`` seconds of the injected clock. When the asker stops
        waiting — the timeout, or its own run being cancelled — the task is withdrawn, so no
        colleague works (and spends) for nobody.

        ``checkpoint`` (a tool call of the asking run): a graceful stop of the daemon ends
        the wait at once with :class:`Stopping` — the asking run stops at this checkpoint
        and the task stays in the journal for the restart, neither withdrawn nor waited
        out until the agent stop limit cancels the run.
        """
        desk = self._desk
        contenders: list[Awaitable[Any]] = [
            desk.submit(task) if held is None else held,
            self._clock.sleep(timeout),
        ]
        if checkpoint:
            contenders.append(desk.draining.wait())
        try:
            won = await race(*contenders)
        except asyncio.CancelledError:
            if not (checkpoint and desk.draining.is_set()):
                desk.withdraw(task.id, "the asking run was stopped")
            raise
        if won.index == 2:
            raise Stopping
        if won.index == 0:
            # The outcome is cancelled only by Staff.close(), as the daemon closes — after
            # the tree's stop has ended every agent's run, and this wait with it (cancelled
            # above; a checkpoint ends it sooner, when `draining` is set). Were that order
            # broken, "did not answer within …" would be a false account of it.
            assert not won.future.cancelled(), (
                f"the outcome of {task.id} was cancelled under a waiting run: Staff.close() "
                "must come after the tree's stop, which ends every wait for a colleague"
            )
            outcome: RunOutcome = won.result()
            return outcome
        reason = f"{what} within {timeout:g} s"
        desk.withdraw(task.id, f"the asker stopped waiting: {reason}")
        raise ToolError(f"{reason}; the task was withdrawn. Go on with what you know")


def _waited_for(task: Task) -> str:
    """What a timeout says the colleague did not do (a consultation, a delegation)."""
    if task.id.startswith("consult-"):
        return f"{task.agent} did not answer"
    return f"{task.agent} did not finish the task"


def _consulted(outcome: RunOutcome) -> str:
    """The ``consult`` tool's result: the colleague's answer (or the tool error)."""
    if outcome.status is RunStatus.UNVERIFIED:
        # an answer, but one that claims work its run does not show: the asker sees both
        return f"{outcome.answer}\n\n(⚠ unverified: {outcome.reason})"
    if not outcome.ok:
        raise ToolError(f"{outcome.agent} could not answer: {outcome.status} ({outcome.reason})")
    return outcome.answer


def _delegated(outcome: RunOutcome) -> dict[str, Any]:
    """The ``delegate`` tool's result: the report's outcome."""
    return {
        "agent": outcome.agent,
        "status": str(outcome.status),
        "reason": outcome.reason,
        "result": outcome.answer,
    }
