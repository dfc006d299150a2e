"""Where a run meets the founder: the approval gate and the ``ask_founder`` tool.

* :class:`ApprovalGate` — a tool named in the agent's ``require_approval`` is not called
  until the founder approves that call (docs/desk.md). The agent asks the gate *before* it
  journals the call as started, so after a crash or a ``kill -9`` the resumed run asks again,
  finds the same item on the desk (its key is the run and the tool call) and waits for it
  or acts on its decision: an approved call runs once, a rejected one never.
* :class:`ResultApprovals` — a routine with ``approval: required``: its ``ok`` result goes
  to the founder with Approve / Request changes / Reject; a change request is a follow-up
  task to the same agent (the original task, its result and the change), whose result goes
  to the founder again; the fire is recorded once the founder approves or rejects.
* :func:`ask_founder_tool` — ``ask_founder(question)`` posts the question and waits for the
  answer, within the run's limits (its deadline is the earlier of ``approval_timeout`` and
  what is left of ``max_seconds``). It is idempotent for the journal: re-running it after a
  crash finds the same question instead of asking twice.

Nothing here touches Telegram: the desk's events reach the founder through the alerts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from companyd.agents._tools import Tool, ToolCallContext, ToolError, json_schema
from companyd.config import AgentConfig
from companyd.desk import DEFAULT_APPROVAL_TIMEOUT, Desk, DeskFull, DeskItem, ItemKind, ItemState
from companyd.llm import ToolResultBlock, ToolUseBlock
from companyd.runs import RunOutcome, RunStatus, Task

__all__ = ["ASK_FOUNDER", "ApprovalGate", "ResultApprovals", "ask_founder_tool", "wait_text"]

#: The name of the question tool.
ASK_FOUNDER = "ask_founder"


def wait_text(seconds: float) -> str:
    """``24 h``, ``90 min``, ``45 s``: a wait as the founder and the model read it."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


class ApprovalGate:
    """The founder's approval of one agent's dangerous tool calls.

    Args:
        desk: the founder's desk.
        agent: the agent's configuration (its ``require_approval`` and
            ``approval_timeout``).
    """

    def __init__(self, desk: Desk, agent: AgentConfig) -> None:
        self._desk = desk
        self._agent = agent

    def needs_approval(self, tool: str) -> bool:
        """Whether calls of ``tool`` wait for the founder."""
        return tool in self._agent.require_approval

    async def ask(
        self, tool_use: ToolUseBlock, *, run_id: str, routine: str | None, reason: str
    ) -> DeskItem:
        """The desk item for this call: put on the desk (announced to the founder) the
        first time, found again when a resumed run asks about the same call.
        """
        return await self._desk.request(
            key=f"{run_id}/{tool_use['id']}",
            kind=ItemKind.APPROVAL,
            agent=self._agent.slug,
            run_id=run_id,
            routine=routine,
            payload={"tool": tool_use["name"], "input": tool_use.get("input"), "reason": reason},
            timeout=self._agent.approval_timeout,
        )

    async def wait(self, item: DeskItem) -> DeskItem:
        """Until the founder decides (or the deadline passes: ``expired``)."""
        return await self._desk.wait(item)

    def refusal(self, tool_use: ToolUseBlock, item: DeskItem) -> ToolResultBlock | None:
        """None if the call may run; else the tool error the model sees instead."""
        if item.state is ItemState.APPROVED:
            return None
        if item.state is ItemState.EXPIRED:
            why = (
                f"no answer within {wait_text(item.deadline - item.created)} "
                "(approval_timeout), which counts as a rejection"
            )
        else:
            why = item.text or "no reason given"
        return {
            "type": "tool_result",
            "tool_use_id": str(tool_use["id"]),
            "is_error": True,
            "content": f"rejected by the founder: {why}",
        }


def ask_founder_tool(desk: Desk, agent: AgentConfig) -> Tool:
    """``ask_founder(question)`` for ``agent``: the founder's answer is the tool's result."""

    async def ask(arguments: Mapping[str, Any], ctx: ToolCallContext) -> Any:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ToolError("ask_founder needs 'question': what you want the founder to answer")
        timeout = agent.approval_timeout
        if ctx.run_seconds_left is not None:
            timeout = min(timeout, max(ctx.run_seconds_left, 0.0))
        try:
            item = await desk.request(
                key=f"{ctx.run_id}/{ctx.tool_use_id}",
                kind=ItemKind.QUESTION,
                agent=agent.slug,
                run_id=ctx.run_id,
                routine=ctx.routine,
                payload={"question": question.strip()},
                timeout=timeout,
                open_limit=agent.max_open_questions,
            )
        except DeskFull as full:
            # Refused to the agent, not posted: the founder's thread is not flooded by a
            # loop of questions (tools.max_open_questions, docs/desk.md).
            raise ToolError(
                f"not asked: you already have {len(full.open_ids)} question(s) waiting for "
                f"the founder ({', '.join(full.open_ids)}) and at most {full.limit} may wait "
                "at once (tools.max_open_questions); wait for those answers, put what you "
                "need into one question later, or carry on with your best judgement and say "
                "what you assumed"
            ) from None
        item = await desk.wait(item)
        if item.state is ItemState.ANSWERED:
            return f"The founder answered: {item.text}"
        if item.announced is None:
            # queued behind this agent's other questions (one is shown at a time): the
            # founder never saw it — not "did not answer"
            raise ToolError(
                "not asked: the question waited behind your other questions to the founder "
                "(one is shown at a time) and its time ran out before it was shown; carry on "
                "with your best judgement and say what you assumed, or ask again once your "
                "other questions are answered"
            )
        raise ToolError(
            f"the founder did not answer within {wait_text(item.deadline - item.created)}; "
            "carry on with your best judgement and say what you assumed"
        )

    return Tool(
        name=ASK_FOUNDER,
        description=(
            "Ask the founder a question and wait for the answer (it may take a while). Use it "
            "only when you cannot go on without the founder's decision or knowledge; ask one "
            "clear question with the options you see."
        ),
        input_schema=json_schema({"question": {"type": "string"}}, ["question"]),
        handler=ask,
        # a call interrupted by a crash is asked again: the desk finds the same question
        idempotent=True,
        family="founder",
    )


class ResultApprovals:
    """The founder's verdict on routine results (``approval: required``); the scheduler's
    :class:`~companyd.scheduler._sink.ResultGate`.

    A fire's rounds are named after its task (the *root*): the result of round N is the desk
    item ``<root>/result/N`` and the follow-up task of a change request is ``<root>.N+1``,
    so a daemon restarted mid-way (:meth:`resumed`) finds where the fire stood — a result
    waiting, decided while it was down, or a follow-up run the journal resumes — and goes
    on from there instead of asking again.

    Args:
        desk: the founder's desk.
        submit: runs a task to its outcome (``Staff.submit``): the follow-ups.
        held: the outcome of a task the runtime restored from its journal, if it holds it
            (``Staff.resumed``): a follow-up interrupted by a restart is not run twice.
        task_of: a task by id from the run journal (a fire's task after a restart).
        timeout: seconds an agent's result waits for the founder (its
            ``approval_timeout``).
    """

    def __init__(
        self,
        desk: Desk,
        submit: Callable[[Task], Awaitable[RunOutcome]],
        *,
        held: Callable[[str], Awaitable[RunOutcome] | None] = lambda task_id: None,
        task_of: Callable[[str], Awaitable[Task | None]] | None = None,
        timeout: Callable[[str], float] = lambda agent: DEFAULT_APPROVAL_TIMEOUT,
    ) -> None:
        self._desk = desk
        self._submit = submit
        self._held = held
        self._task_of = task_of
        self._timeout = timeout

    async def settle(
        self, task: Task, outcome: RunOutcome, asked: Callable[[str], None] | None = None
    ) -> RunOutcome:
        """:meth:`ResultGate.settle <companyd.scheduler._sink.ResultGate.settle>`."""
        return await self._rounds(task.id, task, outcome, 1, asked)

    async def settle_task(self, task_id: str, outcome: RunOutcome) -> RunOutcome:
        """:meth:`ResultGate.settle_task <companyd.scheduler._sink.ResultGate.settle_task>`."""
        task = await self._task_of(task_id) if self._task_of is not None else None
        if task is None:
            return outcome  # the journal no longer knows the task: nothing to ask about
        return await self._rounds(task.id, task, outcome, 1)

    async def resumed(self, task_id: str) -> Awaitable[RunOutcome] | None:
        """:meth:`ResultGate.resumed <companyd.scheduler._sink.ResultGate.resumed>`."""
        item = await self._desk.latest(f"{task_id}/result/")
        if item is None:
            return None
        p = item.payload
        task = Task.from_dict(dict(p["task_json"]))
        outcome = RunOutcome(
            task_id=task.id,
            run_id=item.run_id or "",
            agent=item.agent,
            status=RunStatus.UNVERIFIED if p.get("unverified") else RunStatus.OK,
            started=item.created,
            ended=item.created,
            reason=p.get("unverified") or None,
            answer=str(p.get("answer") or ""),
            cost_usd=float(p.get("cost_usd") or 0.0),
        )
        return self._rounds(task_id, task, outcome, int(p.get("round") or 1))

    async def _rounds(
        self,
        root: str,
        task: Task,
        outcome: RunOutcome,
        first: int,
        asked: Callable[[str], None] | None = None,
    ) -> RunOutcome:
        """From round ``first`` (``task`` and its ``outcome``) until the founder approves,
        rejects, lets the deadline pass, or a follow-up run fails; ``asked`` is told the
        first round's item id once it is on the desk.
        """
        rounds = first
        sent_back: str | None = None  # the item of the round the founder sent back
        while True:
            item = await self._desk.request(
                key=f"{root}/result/{rounds}",
                kind=ItemKind.RESULT,
                agent=task.agent,
                run_id=outcome.run_id,
                routine=task.routine,
                payload={
                    "task": task.prompt,
                    "task_json": task.to_dict(),
                    "answer": outcome.answer,
                    "cost_usd": outcome.cost_usd,
                    "round": rounds,
                    "follows": sent_back,
                    "unverified": (
                        outcome.reason if outcome.status is RunStatus.UNVERIFIED else None
                    ),
                    "offline": outcome.offline or None,
                },
                timeout=self._timeout(task.agent),
            )
            if asked is not None:
                asked(item.id)
                asked = None
            item = await self._desk.wait(item)
            if item.state is ItemState.APPROVED:
                reason = "approved by the founder" + (
                    f" after {rounds - 1} change request(s)" if rounds > 1 else ""
                )
                if outcome.status is RunStatus.UNVERIFIED:
                    # the founder saw the warning and approved: the run stays unverified
                    reason += f"; unverified: {outcome.reason}"
                return replace(outcome, reason=reason)
            if item.state is not ItemState.CHANGES:
                why = item.text or "no reason given"
                if item.state is ItemState.EXPIRED:
                    why = (
                        f"no answer within {wait_text(item.deadline - item.created)} "
                        "(approval_timeout), which counts as a rejection"
                    )
                return replace(
                    outcome, status=RunStatus.FAILED, reason=f"rejected by the founder: {why}"
                )
            sent_back = item.id
            task = replace(
                task,
                id=f"{root}.{rounds + 1}",
                prompt=(
                    f"{task.prompt}\n\nYour result was:\n{outcome.answer}\n\nThe founder "
                    f"asks for changes:\n{item.text}\n\nDo the work again with these "
                    "changes and give the whole new result."
                ),
                created=item.decided or task.created,
                reply_to=outcome.run_id,  # the transcript's thread: round n+1 follows n
            )
            held = self._held(task.id)  # a follow-up the journal resumed after a restart
            outcome = await (held if held is not None else self._submit(task))
            rounds += 1
            if outcome.status not in (RunStatus.OK, RunStatus.UNVERIFIED):
                return outcome
