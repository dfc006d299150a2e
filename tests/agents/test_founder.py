"""Where a run meets the founder, without a daemon: the approval gate's verdicts as the model
reads them, ask_founder within the run's limits, the configuration that turns them on.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from agentkit import company_yaml
from companyd.agents import (
    ApprovalGate,
    ResultApprovals,
    ToolCallContext,
    ToolError,
    ask_founder_tool,
)
from companyd.clock import ManualClock
from companyd.config import CompanyConfig, load_config_text
from companyd.desk import Desk, ItemState
from companyd.events import EventBus
from companyd.llm._blocks import ToolUseBlock
from companyd.runs import RunOutcome, RunStatus, Task

CALL: ToolUseBlock = {
    "type": "tool_use",
    "id": "tu-1",
    "name": "post_tweet",
    "input": {"text": "We launch today"},
}


def _config(tmp_path: Path, **top: object) -> CompanyConfig:
    text = company_yaml(
        {"marketing": {"tools": {"require_approval": ["post_tweet"], "ask_founder": True}}},
        **top,
    )
    return load_config_text(text, base_dir=tmp_path)


def test_require_approval_adds_to_the_defaults_and_the_timeout_defaults_to_a_day(
    tmp_path: Path,
) -> None:
    cfg = _config(tmp_path)
    marketing = cfg.agents["marketing"]
    assert marketing.require_approval == {"post_tweet"}
    assert marketing.approval_timeout == 86_400.0
    assert marketing.tools.ask_founder is True
    defaults = {"tools": {"require_approval": ["send_email"], "approval_timeout": "2h"}}
    cfg = _config(tmp_path, defaults={**_base_defaults(), **defaults})
    assert cfg.agents["marketing"].require_approval == {"post_tweet", "send_email"}
    assert cfg.agents["marketing"].approval_timeout == 7200.0


def _base_defaults() -> dict[str, object]:
    return {
        "model": {"primary": "claude-sonnet-5-5"},
        "limits": {"max_steps": 30, "max_cost_usd": 5, "max_seconds": "10m"},
    }


@pytest.mark.anyio
async def test_an_unanswered_approval_is_a_rejection_the_model_can_read(tmp_path: Path) -> None:
    clock = ManualClock()
    desk = Desk(tmp_path / "desk.sqlite", bus=EventBus(clock), clock=clock)
    gate = ApprovalGate(desk, _config(tmp_path).agents["marketing"])
    try:
        assert gate.needs_approval("post_tweet") and not gate.needs_approval("recall")
        item = await gate.ask(CALL, run_id="run-1", routine=None, reason="launch")
        waiting = asyncio.create_task(gate.wait(item))
        async with asyncio.timeout(5):
            while clock.sleepers == 0:
                await asyncio.sleep(0.01)
            clock.advance(86_400.0)
            item = await waiting
        refusal = gate.refusal(CALL, item)
        assert refusal is not None and refusal["is_error"] is True
        assert refusal["content"] == (
            "rejected by the founder: no answer within 24 h (approval_timeout), which counts "
            "as a rejection"
        )
        approved = await gate.ask(
            {**CALL, "id": "tu-2"}, run_id="run-1", routine=None, reason="again"
        )
        approved = await desk.decide(approved.id, ItemState.APPROVED)
        assert gate.refusal(CALL, approved) is None
    finally:
        await desk.close()


@pytest.mark.anyio
async def test_ask_founder_waits_no_longer_than_what_is_left_of_the_run(tmp_path: Path) -> None:
    clock = ManualClock()
    desk = Desk(tmp_path / "desk.sqlite", bus=EventBus(clock), clock=clock)
    tool = ask_founder_tool(desk, _config(tmp_path).agents["marketing"])
    ctx = ToolCallContext(
        agent="marketing", run_id="run-1", task_id="t-1", tool_use_id="tu-1", run_seconds_left=90
    )
    try:
        asking = asyncio.ensure_future(tool.handler({"question": "Friday or Monday?"}, ctx))
        async with asyncio.timeout(5):
            while clock.sleepers == 0:
                await asyncio.sleep(0.01)
            (item,) = await desk.pending()
            assert item.deadline - item.created == 90.0  # not the 24 h approval_timeout
            clock.advance(90.0)
            with pytest.raises(ToolError, match=r"did not answer within 1.5 min; carry on"):
                await asking
        # answered in time, the answer is the result
        again = replace(ctx, tool_use_id="tu-2", run_seconds_left=None)
        asking = asyncio.ensure_future(tool.handler({"question": "Which city?"}, again))
        async with asyncio.timeout(5):
            while not await desk.pending():
                await asyncio.sleep(0.01)
            (item,) = await desk.pending()
            await desk.decide(item.id, ItemState.ANSWERED, "Lisbon")
            assert await asking == "The founder answered: Lisbon"
    finally:
        await desk.close()


@pytest.mark.anyio
async def test_ask_founder_is_bounded_per_agent_and_a_burst_is_refused_to_the_agent(
    tmp_path: Path,
) -> None:
    """Issue 32 item 8: 30 questions in a burst put at most ``max_open_questions`` (3 by
    default) on the desk — one message to the founder, not 30, the others queued behind it;
    the rest are refused to the agent with the reason as the tool's result. A resumed run
    asking again finds its own question; an answer sends the next and makes room.
    """
    clock = ManualClock()
    bus = EventBus(clock)
    questions = bus.subscribe(kinds={"founder_question"})
    desk = Desk(tmp_path / "desk.sqlite", bus=bus, clock=clock)
    marketing = _config(tmp_path).agents["marketing"]
    assert marketing.max_open_questions == 3
    tool = ask_founder_tool(desk, marketing)

    def ctx(n: int) -> ToolCallContext:
        return ToolCallContext(
            agent="marketing", run_id="run-1", task_id="t-1", tool_use_id=f"tu-{n}"
        )

    try:
        burst = [
            asyncio.ensure_future(tool.handler({"question": f"Question {n}?"}, ctx(n)))
            for n in range(30)
        ]
        async with asyncio.timeout(10):
            while sum(t.done() for t in burst) < 27:
                await asyncio.sleep(0.01)
        pending = await desk.pending()
        assert len(pending) == 3
        refused = [t for t in burst if t.done()]
        for t in refused:
            with pytest.raises(ToolError) as info:
                t.result()
            assert "not asked: you already have 3 question(s) waiting" in str(info.value)
            assert "at most 3 may wait at once (tools.max_open_questions)" in str(info.value)
            assert pending[0].id in str(info.value)
        shown = []
        while (event := questions.get_nowait()) is not None:
            shown.append(event.data["item_id"])
        # ONE message, not 30 nor 3: the other two queue behind it (docs/desk.md)
        assert shown == [pending[0].id]
        # a resumed run asking the same call again finds its question, never refused
        first = next(t for t in burst if not t.done())
        n = burst.index(first)
        again = asyncio.ensure_future(tool.handler({"question": f"Question {n}?"}, ctx(n)))
        await asyncio.sleep(0.05)
        assert not again.done()
        # an answer sends the next question and makes room for one more
        await desk.decide(pending[0].id, ItemState.ANSWERED, "Yes")
        event = questions.get_nowait()
        assert event is not None and event.data["item_id"] == pending[1].id
        assert questions.get_nowait() is None
        more = asyncio.ensure_future(tool.handler({"question": "One more?"}, ctx(99)))
        async with asyncio.timeout(5):
            while len(await desk.pending()) < 3 or not any(
                i.payload.get("question") == "One more?" for i in await desk.pending()
            ):
                await asyncio.sleep(0.01)
        for t in [*burst, again, more]:
            t.cancel()
    finally:
        await desk.close()


def test_max_open_questions_has_a_default_and_an_agent_may_say_more(tmp_path: Path) -> None:
    defaults = {**_base_defaults(), "tools": {"max_open_questions": 5}}
    assert _config(tmp_path, defaults=defaults).agents["marketing"].max_open_questions == 5
    text = company_yaml({"marketing": {"tools": {"ask_founder": True, "max_open_questions": 1}}})
    assert load_config_text(text, base_dir=tmp_path).agents["marketing"].max_open_questions == 1


@pytest.mark.anyio
async def test_an_unanswered_result_is_denied_never_delivered(tmp_path: Path) -> None:
    # approval: required and nobody answers: the fire ends failed, saying why (never ok)
    clock = ManualClock()
    bus = EventBus(clock)
    desk = Desk(tmp_path / "desk.sqlite", bus=bus, clock=clock)
    submitted: list[Task] = []

    async def submit(task: Task) -> RunOutcome:
        submitted.append(task)
        raise AssertionError("no follow-up run without a change request")

    gate = ResultApprovals(desk, submit, timeout=lambda agent: 3600.0)
    task = Task(
        id="task-r1",
        agent="marketing",
        prompt="Draft the post.",
        source="routine:daily-post",
        created=clock.time(),
        routine="daily-post",
    )
    outcome = RunOutcome(
        task_id=task.id,
        run_id="run-r1",
        agent="marketing",
        status=RunStatus.OK,
        started=clock.time(),
        ended=clock.time(),
        answer="We launch today!",
    )
    try:
        settling = asyncio.create_task(gate.settle(task, outcome))
        async with asyncio.timeout(5):
            while clock.sleepers == 0:
                await asyncio.sleep(0.01)
            clock.advance(2700.0)  # three quarters: one reminder
            while not bus.recent({"founder_reminder"}) or clock.sleepers == 0:
                await asyncio.sleep(0.01)
            clock.advance(900.0)
            settled = await settling
    finally:
        await desk.close()
    assert settled.status is RunStatus.FAILED and not submitted
    assert settled.reason == (
        "rejected by the founder: no answer within 1 h (approval_timeout), which counts as a "
        "rejection"
    )
    assert [e.data["state"] for e in bus.recent({"founder_decided"})] == ["expired"]
    assert len(bus.recent({"founder_reminder"})) == 1  # at 45 minutes, once


@pytest.mark.anyio
async def test_a_queued_question_that_expires_unshown_is_not_called_unanswered(
    tmp_path: Path,
) -> None:
    # two questions at once: the second waits behind the first, never shown; at the
    # deadline the agent read "the founder did not answer" of one the founder never saw
    clock = ManualClock()
    desk = Desk(tmp_path / "desk.sqlite", bus=EventBus(clock), clock=clock)
    marketing = _config(tmp_path).agents["marketing"]
    tool = ask_founder_tool(desk, marketing)

    def ctx(n: int) -> ToolCallContext:
        return ToolCallContext(
            agent="marketing", run_id="run-1", task_id="t-1", tool_use_id=f"tu-{n}"
        )

    try:
        shown = asyncio.ensure_future(tool.handler({"question": "Shown?"}, ctx(1)))
        await asyncio.sleep(0.05)
        queued = asyncio.ensure_future(tool.handler({"question": "Queued?"}, ctx(2)))
        async with asyncio.timeout(10):
            while len(await desk.pending()) < 2:
                await asyncio.sleep(0.01)
            clock.advance(marketing.approval_timeout + 1)
            await asyncio.wait({shown, queued})
        with pytest.raises(ToolError, match="the founder did not answer within"):
            shown.result()
        with pytest.raises(ToolError) as info:
            queued.result()
        assert str(info.value).startswith("not asked: the question waited behind your other")
    finally:
        await desk.close()
