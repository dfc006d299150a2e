"""The unit tier of the agent runtime: one Agent built from its deps, without a Daemon.

The services are real — the run journal and the spend book on ``tmp_path``, the anthropic
SDK (``ClaudeBackend``) talking to the loopback Messages API stand-in, the event bus on a
``ManualClock`` — and the staff is :class:`OneDesk`, the smallest ``StaffPort``: a queue of
tasks, a record of outcomes and pauses, and a toolbox with one tool of the test's own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from companyd.agents import Agent, AgentDeps, RunState, Tool, ToolBox, ToolCallContext
from companyd.agents._tools import json_schema
from companyd.clock import ManualClock
from companyd.config import AgentConfig, CompanyConfig, load_config_text
from companyd.events import Event, EventBus
from companyd.llm._claude import ClaudeBackend
from companyd.runs import Journal, RunOutcome, RunStatus, Task, TaskState, new_id
from companyd.spend import BudgetExhausted, SpendBook
from companyd.spend._ledger import from_pusd
from companyd.supervision._child import StandaloneContext
from companyd.testing.messages_api import (
    MessagesAPIServer,
    RecordedRequest,
    ScriptItem,
    reply_text,
    reply_tool_use,
)

pytestmark = pytest.mark.anyio

COMPANY = """\
schema: companyd/v1
company:
  name: Unit Co
  timezone: UTC
  budget: {{daily_usd: {daily}, monthly_usd: 500}}
defaults:
  model: {{primary: claude-sonnet-5-5, fallbacks: [claude-haiku-5-5]}}
  limits: {{max_steps: 30, max_cost_usd: 5, max_seconds: 10m}}
  heartbeat_seconds: 120
agents:
  ceo:
    title: CEO
    instructions: You are the ceo.
"""


class OneDesk:
    """A StaffPort for one agent: hands out the tasks it was given, then waits for the stop;
    records outcomes, pauses and runs. Its toolbox is one ``note`` tool (not idempotent).
    """

    def __init__(self, tasks: Iterable[Task], tools: Sequence[Tool]) -> None:
        self.draining = asyncio.Event()
        self.queue = collections.deque(tasks)
        self.tools = list(tools)
        self.outcomes: list[RunOutcome] = []
        self.done = asyncio.Event()
        self.paused: dict[str, tuple[str, bool]] = {}
        self.runs: list[RunState] = []
        self.ended: list[str] = []

    @property
    def timezone(self) -> str:
        return "UTC"

    def system_prompt(self, agent: AgentConfig) -> str:
        return f"You are {agent.title} ({agent.slug}) at Unit Co. {agent.instructions}"

    async def toolbox_for(self, agent: AgentConfig, stack: contextlib.AsyncExitStack) -> ToolBox:
        return ToolBox.build(self.tools, agent.tools)

    async def next_task(self, agent: str, stopping: asyncio.Event) -> Task | None:
        if self.queue and agent not in self.paused:
            return self.queue.popleft()
        await stopping.wait()
        return None

    def run_started(self, agent: str, run: RunState) -> None:
        self.runs.append(run)

    def run_ended(self, agent: str) -> None:
        self.ended.append(agent)

    def finished(self, outcome: RunOutcome) -> None:
        self.outcomes.append(outcome)
        self.done.set()

    def requeue(self, task: Task) -> None:
        self.queue.append(task)

    async def review(
        self, task: Task, answer: str, worker: str, run_id: str | None = None
    ) -> str | None:
        return None

    def pause(self, agent: str, reason: str, *, budget: bool = False) -> None:
        self.paused[agent] = (reason, budget)

    def api_spend_limit(self, message: str) -> None:
        raise AssertionError(f"unexpected API spend limit: {message}")

    def api_key_refused(self, message: str) -> None:
        raise AssertionError(f"unexpected API key refusal: {message}")

    def quota_wall(self, model: str) -> float | None:
        return None

    def meet_quota_wall(self, model: str, retry_after: float | None) -> float | None:
        return None

    def quota_walled(self, agent: str, message: str) -> str | None:
        raise AssertionError(f"unexpected quota wall: {message}")

    def take_injected_crash(self, agent: str) -> None:
        return None


class Services:
    """The real services an agent uses, on ``tmp_path`` and a manual clock."""

    def __init__(self, config: CompanyConfig, state_dir: Path, server: MessagesAPIServer) -> None:
        self.config = config
        self.state_dir = state_dir
        self.clock = ManualClock()
        self.bus = EventBus(self.clock)
        self.journal = Journal(state_dir / "runs.sqlite")
        self.book = SpendBook(config, state_dir, bus=self.bus, clock=self.clock)
        self.backend = ClaudeBackend(
            api_key="test-key", base_url=server.base_url, max_retries=0, timeout=30.0
        )

    def deps(self, staff: OneDesk) -> AgentDeps:
        return AgentDeps(
            staff=staff,
            bus=self.bus,
            clock=self.clock,
            journal=self.journal,
            spend=self.book,
            backend=self.backend,
            budget_exhausted_error=BudgetExhausted,
            state_dir=self.state_dir,
        )

    def events(self, kind: str) -> list[Event]:
        return self.bus.recent({kind}, limit=100)


@contextlib.asynccontextmanager
async def services(
    tmp_path: Path, script: Sequence[ScriptItem], *, daily_usd: float = 50
) -> AsyncIterator[tuple[Services, MessagesAPIServer]]:
    config = load_config_text(COMPANY.format(daily=daily_usd), base_dir=tmp_path)
    with MessagesAPIServer(script=script, default_responder=False) as server:
        s = Services(config, tmp_path, server)
        await s.journal.open()
        try:
            async with s.book:
                yield s, server
        finally:
            await s.backend.aclose()
            await s.journal.close()


async def serve(agent: Agent, desk: OneDesk) -> None:
    """Run ``agent`` until it has finished a task, then stop it as a supervisor would."""
    ctx = StandaloneContext("companyd/agents/ceo")
    body = asyncio.create_task(agent.run(ctx))
    try:
        await desk.done.wait()
    finally:
        ctx.stopping.set()
        await body


def note_tool(
    notes: list[str], *, entered: asyncio.Event | None = None, gate: asyncio.Event | None = None
) -> Tool:
    """A tool that appends its ``text`` to ``notes``; it sets ``entered`` when called and
    waits for ``gate`` to open first, if given.
    """

    async def note(args: Mapping[str, Any], ctx: ToolCallContext) -> Any:
        if entered is not None:
            entered.set()
        if gate is not None:
            await gate.wait()
        notes.append(str(args["text"]))
        return f"noted ({ctx.agent}, run {ctx.run_id})"

    return Tool(
        name="note",
        description="Write a note.",
        input_schema=json_schema({"text": {"type": "string"}}, ["text"]),
        handler=note,
        idempotent=False,
    )


def a_task(clock: ManualClock, prompt: str = "Note that Acme signed.") -> Task:
    return Task(
        id=new_id("task"), agent="ceo", prompt=prompt, source="operator", created=clock.time()
    )


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    body = request.body if isinstance(request.body, dict) else {}
    content = body["messages"][-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


async def test_an_agent_built_from_its_deps_runs_a_task_end_to_end(tmp_path: Path) -> None:
    """Model call → tool call → model call → answer: each call priced in the spend book,
    each step journaled, the outcome handed to the staff, the events published.
    """
    script = [reply_tool_use("note", {"text": "Acme signed"}), reply_text("Done: Acme is noted.")]
    notes: list[str] = []
    async with asyncio.timeout(20), services(tmp_path, script) as (s, srv):
        task = a_task(s.clock)
        await s.journal.add_task(task, s.clock.time())
        desk = OneDesk([task], [note_tool(notes)])
        await serve(Agent(s.config.agents["ceo"], s.deps(desk)), desk)

        [outcome] = desk.outcomes
        assert outcome.status is RunStatus.OK and outcome.task_id == task.id
        assert outcome.answer == "Done: Acme is noted."
        assert outcome.steps == 2 and outcome.models == ("claude-sonnet-5-5",)
        assert notes == ["Acme signed"]
        # the model saw the agent's prompt and tool, then the tool's result
        assert srv.served == 2
        first, second = srv.requests
        assert isinstance(first.body, dict) and "Unit Co" in str(first.body["system"])
        assert [t["name"] for t in first.body["tools"]] == ["note"]
        assert "Note that Acme signed." in str(first.body["messages"][0]["content"])
        [result] = tool_results(second)
        assert "noted (ceo, run " in str(result["content"]) and not result.get("is_error")
        # every call was reserved and settled: the ledger holds both, at the outcome's cost
        await s.book.flush()
        rows = await s.book.ledger_rows()
        assert len(rows) == 2 and all(r["agent"] == "ceo" for r in rows)
        assert float(from_pusd(sum(r["cost_pusd"] for r in rows))) == outcome.cost_usd
        assert outcome.cost_usd > 0
        # the journal closed the task and the run
        got = await s.journal.get_task(task.id)
        assert got is not None and got[1] == TaskState.DONE
        [run] = await s.journal.runs(agent="ceo")
        assert run["run_id"] == outcome.run_id and run["status"] == "ok" and run["steps"] == 2
        assert await s.journal.unfinished_runs("ceo") == []
        # the staff saw the run start and end; the bus saw it too
        assert [r.run_id for r in desk.runs] == [outcome.run_id] and desk.ended == ["ceo"]
        assert [e.data["run_id"] for e in s.events("run_finished")] == [outcome.run_id]
        assert desk.paused == {}


async def test_a_stopped_run_resumes_in_a_new_agent_without_paying_twice(tmp_path: Path) -> None:
    """Stopped after its tool call, the run stays journaled; a new Agent from the same deps
    resumes it from the journal: the first model call is not made (or paid) again and the
    tool, which is not idempotent, does not run again.
    """
    script = [reply_tool_use("note", {"text": "Acme signed"}), reply_text("Done after resume.")]
    notes: list[str] = []
    entered, gate = asyncio.Event(), asyncio.Event()
    async with asyncio.timeout(20), services(tmp_path, script) as (s, srv):
        task = a_task(s.clock)
        await s.journal.add_task(task, s.clock.time())
        first = OneDesk([task], [note_tool(notes, entered=entered, gate=gate)])
        ctx = StandaloneContext("companyd/agents/ceo")
        body = asyncio.create_task(Agent(s.config.agents["ceo"], s.deps(first)).run(ctx))
        await entered.wait()
        ctx.stopping.set()  # the stop begins while the tool runs …
        gate.set()  # … which then finishes; the run stops at its next checkpoint
        await body
        assert first.outcomes == [] and notes == ["Acme signed"] and srv.served == 1
        [left] = await s.journal.unfinished_runs("ceo")

        second = OneDesk([], [note_tool(notes)])
        await serve(Agent(s.config.agents["ceo"], s.deps(second)), second)

        [outcome] = second.outcomes
        assert outcome.status is RunStatus.OK and outcome.answer == "Done after resume."
        assert outcome.run_id == left.run_id and outcome.steps == 2
        assert notes == ["Acme signed"] and srv.served == 2
        await s.book.flush()
        assert len(await s.book.ledger_rows()) == 2


async def test_a_budget_refusal_ends_the_run_and_pauses_the_agent_through_its_staff(
    tmp_path: Path,
) -> None:
    """The spend book refuses the first call's worst case: nothing is sent, the run ends
    ``budget_exhausted`` and the agent asks its staff to pause it for its budget.
    """
    async with asyncio.timeout(20), services(tmp_path, [], daily_usd=0.001) as (s, srv):
        task = a_task(s.clock)
        await s.journal.add_task(task, s.clock.time())
        desk = OneDesk([task], [])
        await serve(Agent(s.config.agents["ceo"], s.deps(desk)), desk)

        [outcome] = desk.outcomes
        assert outcome.status is RunStatus.BUDGET_EXHAUSTED and outcome.steps == 0
        reason, budget = desk.paused["ceo"]
        assert budget and reason.startswith("budget: ")
        assert srv.served == 0 and srv.requests == []
        assert await s.book.ledger_rows() == []
