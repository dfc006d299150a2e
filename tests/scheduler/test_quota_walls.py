"""Quota walls through the real runtime: a 429 with a long ``retry-after`` on every model.

The scheduler hands each fire to the agents (real journal, spend, memory), which call the
Messages API stand-in through ClaudeBackend and the real SDK, all on a manual clock. The
stand-in answers every call with 429 ``retry-after: 900`` for fifteen minutes from the first
call, then works: each agent makes exactly one call (the one that meets the wall), its fires
meanwhile are ``skipped: rate limited until HH:MM`` (no call), one ``quota_wall`` event
tells it, and it resumes by itself when the time comes (docs/agents.md, "Quota walls").
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from companyd.admin import render_status
from companyd.admin._wire import result_data
from companyd.agents import SpendPort
from companyd.agents._pauses import Pauses
from companyd.alerts._render_status import format_status
from companyd.clock import ManualClock
from companyd.config import load_config_text
from companyd.daemon._main import Daemon
from companyd.events import Event, EventBus
from companyd.llm._claude import ClaudeBackend
from companyd.runs import Journal, RunStatus, Task
from companyd.testing.messages_api import MessagesAPIServer, RecordedRequest
from companyd.testing.messages_script import ScriptItem, rate_limited
from companyd.testing.sim_runtime import (
    RoutineResponder,
    RuntimeSimReport,
    _agent,
    simulate_company,
)

from .conftest import company_text, ts

pytestmark = pytest.mark.anyio

WALL = 900.0


class Wall:
    """429 with ``retry-after`` counting down to ``first call + WALL``, then real work.
    Records (clock time, agent) of every call.
    """

    def __init__(self, clock: ManualClock, retry_after: float = WALL) -> None:
        self.clock = clock
        self.retry_after = retry_after
        self.end: float | None = None
        self.inner = RoutineResponder()
        self.calls: list[tuple[float, str]] = []

    def __call__(self, request: RecordedRequest) -> ScriptItem:
        now = self.clock.time()
        body = request.body if isinstance(request.body, dict) else {}
        self.calls.append((now, _agent(body.get("system"))))
        if self.end is None:
            self.end = now + self.retry_after
        if now < self.end:
            return rate_limited(retry_after=round(self.end - now))
        return self.inner(request)


def walled_company(models: str) -> str:
    return (
        company_text(
            """\
            post:
              assignee: marketing
              description: Post.
              trigger: {every: 5m}
            ops:
              assignee: coo
              description: Operate.
              trigger: {every: 5m}
            """
        )
        + "anthropic: {max_retries: 2}\n"
        + models
    )


async def run(
    tmp_path: Path, config_text: str, minutes: float, wall: float = WALL
) -> tuple[RuntimeSimReport, Wall]:
    config = load_config_text(config_text)
    clock = ManualClock(start=ts("2027-01-04T13:00:00"))
    responder = Wall(clock, wall)
    with MessagesAPIServer(responder=responder) as server:
        async with asyncio.timeout(60):
            report = await simulate_company(
                config, minutes / 1440, server, clock, state_dir=tmp_path / "state"
            )
    return report, responder


async def test_a_long_retry_after_on_every_model_pauses_the_agents_until_then(
    tmp_path: Path,
) -> None:
    # marketing on one model, coo on another: the wall is met once per agent
    text = walled_company("")
    text = text.replace(
        "marketing: {title: Marketing, reportsTo: ceo, instructions: Post.}",
        "marketing: {title: Marketing, reportsTo: ceo, instructions: Post., "
        "model: claude-sonnet-5-5}",
    ).replace(
        "coo: {title: COO, reportsTo: ceo, instructions: Operate.}",
        "coo: {title: COO, reportsTo: ceo, instructions: Operate., model: claude-haiku-5-5}",
    )
    report, wall = await run(tmp_path, text, 40)
    assert wall.end is not None
    start = ts("2027-01-04T13:00:00")
    # the first fires (13:05) met the wall: 13:05 + 900 s = 13:20
    assert wall.end == start + 300 + WALL
    before = Counter(agent for t, agent in wall.calls if t < wall.end)
    assert before == {"marketing": 1, "coo": 1}, wall.calls
    # after the wall's time both work again
    after = Counter(agent for t, agent in wall.calls if t >= wall.end)
    assert after["marketing"] >= 2 and after["coo"] >= 2
    sim = report.sim
    assert sim.complete
    skipped = [r for r in sim.non_success if r.outcome == "skipped"]
    # 13:05 (met the wall), 13:10, 13:15 for each routine; 13:20 runs again
    assert sorted((r.routine, r.scheduled - start) for r in skipped) == sorted(
        (routine, m * 60.0) for routine in ("post", "ops") for m in (5, 10, 15)
    )
    assert all("rate limited until 13:20" in (r.reason or "") for r in skipped)
    assert {r.outcome for r in sim.non_success} == {"skipped"}
    for routine in ("post", "ops"):
        assert sim.routines[routine].outcomes["ok"] >= 4
    events = report.events
    # told once per wall met (each agent's own here: one message, as the pager folds the
    # events of one time into one, and the last names both); nothing failed
    assert events["quota_wall"] == 2 and events["quota_wall_lifted"] >= 1
    assert events["routine_failed"] == 0 and events["model_fallback"] == 0


async def test_agents_on_a_walled_model_are_paused_with_the_one_that_met_it(
    tmp_path: Path,
) -> None:
    # Every agent on one model: the first call meets the wall; the other agent's routine is
    # held back with it, without a call of its own; one event names both.
    text = walled_company("defaults:\n  model: {primary: claude-sonnet-5-5}\n").replace(
        "trigger: {every: 5m}\n  ops:", "trigger: {every: 5m}\n  ops:", 1
    )
    text = text.replace(
        "description: Operate.\n    trigger: {every: 5m}",
        'description: Operate.\n    trigger: {cron: "7-59/5 * * * *"}',
    )
    report, wall = await run(tmp_path, text, 40)
    assert wall.end is not None
    before = Counter(agent for t, agent in wall.calls if t < wall.end)
    assert before == {"marketing": 1}, wall.calls
    assert report.events["quota_wall"] == 1
    skipped = [r for r in report.sim.non_success if r.routine == "ops"]
    assert skipped and all("rate limited until 13:20" in (r.reason or "") for r in skipped)
    assert report.events["routine_failed"] == 0


async def test_a_short_retry_after_behaves_as_before(tmp_path: Path) -> None:
    # 30 s is under quota_pause_after (60 s) and max_retry_after: waited for and retried
    # within the run, which then succeeds; nobody is paused, nothing skipped
    text = walled_company("defaults:\n  model: {primary: claude-sonnet-5-5}\n")
    report, wall = await run(tmp_path, text, 20, wall=30.0)
    assert wall.end is not None
    assert len([t for t, _ in wall.calls if t < wall.end]) == 2
    assert report.events["quota_wall"] == 0 and report.events["agent_paused"] == 0
    assert report.sim.non_success == []


async def status_of(daemon: Daemon) -> dict[str, Any]:
    """``status`` as the control socket answers it (a one-off daemon runs no scheduler: its
    routines part is left empty).
    """
    status = daemon._status_sync()(spend=await daemon._spend_status(), routines=[])
    data: dict[str, Any] = result_data("status", status)
    return data


async def _until(predicate: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(20):
        while not predicate():
            await asyncio.sleep(0.01)
    assert predicate(), what


async def test_status_shows_the_wall_and_a_restart_keeps_it_until_its_time(
    tmp_path: Path,
) -> None:
    config = load_config_text(walled_company("defaults:\n  model: {primary: claude-sonnet-5-5}\n"))
    clock = ManualClock(start=ts("2027-01-04T13:05:00"))
    wall = Wall(clock)
    state = tmp_path / "state"
    with MessagesAPIServer(responder=wall) as server:
        env = {config.spec.anthropic.api_key_env: "k", "ANTHROPIC_BASE_URL": server.base_url}

        def daemon() -> Daemon:
            claude = ClaudeBackend.from_config(config.spec.anthropic, environ=env, clock=clock)
            return Daemon(config, state, backend=claude, clock=clock, oneoff=True)

        events: list[Event] = []
        first = daemon()
        async with first:
            first.bus.add_listener(events.append)
            task = Task(
                id="task-w1",
                agent="marketing",
                prompt="Post.",
                source="operator",
                created=clock.time(),
            )
            async with asyncio.timeout(20):
                outcome = await first.staff.submit(task)
            assert outcome.status is RunStatus.CANCELLED
            assert (outcome.reason or "").startswith("rate limit until 13:20:")
            assert len(wall.calls) == 1
            status = await status_of(first)
            text = render_status(status, now=clock.time())
            assert "paused until 13:20 (rate limit)" in text
            assert "marketing: paused until 13:20 (rate limit)" in format_status(status)
            # a task meanwhile is refused at once, without a call
            again = await first.staff.submit(replace(task, id="task-w2"))
            assert again.status is RunStatus.CANCELLED and len(wall.calls) == 1
        for _ in range(12):
            clock.advance(1.0)
            await asyncio.sleep(0)
        assert [e.kind for e in events].count("quota_wall") == 1
        # every agent is on the walled model: all are held back with the one that met it
        [told] = [e.data["agents"] for e in events if e.kind == "quota_wall"]
        assert told[0] == "marketing" and sorted(told) == ["ceo", "coo", "marketing"]
        second = daemon()  # a restart during the wall: still paused, until the same time
        async with second:
            second.bus.add_listener(events.append)
            assert second.staff.rate_limited_until("marketing") == wall.end
            status = await status_of(second)
            assert "paused until 13:20 (rate limit)" in render_status(status, now=clock.time())
            assert wall.end is not None
            clock.advance(wall.end - clock.time())
            await _until(
                lambda: "marketing" not in second.staff.paused(), "resumed at the wall's time"
            )
            lifted = [e for e in events if e.kind == "quota_wall_lifted"]
            assert len(lifted) == 1
            assert sorted(lifted[0].data["agents"]) == ["ceo", "coo", "marketing"]
            async with asyncio.timeout(20):
                done = await second.staff.submit(replace(task, id="task-w3"))
            assert done.status is RunStatus.OK
        for _ in range(12):
            clock.advance(1.0)
            await asyncio.sleep(0)


async def test_walls_met_at_one_time_are_told_as_one_story_and_lifted_once(
    tmp_path: Path,
) -> None:
    clock = ManualClock(start=ts("2027-01-04T13:05:00"))
    bus = EventBus(clock)
    events: list[Event] = []
    bus.add_listener(events.append)
    journal = Journal(tmp_path / "runs.sqlite")
    await journal.open()
    writes: list[asyncio.Task[Any]] = []
    woken: list[str] = []
    pauses = Pauses(
        agents=lambda: ("ceo", "coo", "marketing"),
        bus=bus,
        clock=clock,
        journal=journal,
        spend=cast(SpendPort, None),  # not asked by a wall
        wake=woken.append,
        spawn=lambda c: writes.append(asyncio.ensure_future(c)),
    )
    try:
        end = clock.time() + 900
        pauses.pause_until(["marketing"], end, "rate limit until 13:20: a", models=["m1"])
        pauses.pause_until(["coo"], end + 20, "rate limit until 13:21: b", models=["m2"])
        pauses.pause_until(["ceo"], end - 30, "rate limit until 13:20: c", models=["m3"])
        walls = [e.data for e in events if e.kind == "quota_wall"]
        assert [(w["agents"], w["until_text"]) for w in walls] == [
            (["marketing"], "13:20"),
            (["coo"], "13:21"),
            (["ceo", "marketing"], "13:20"),  # the same minute: named together
        ]
        async with asyncio.timeout(5):
            while clock.sleepers < 3:
                await asyncio.sleep(0.01)
            clock.advance(925.0)  # past every end at once: one recovery line for all
            while pauses.ends():
                await asyncio.sleep(0.01)
        lifted = [e.data["agents"] for e in events if e.kind == "quota_wall_lifted"]
        assert [sorted(agents) for agents in lifted] == [["ceo", "coo", "marketing"]]
        assert sorted(woken) == ["ceo", "coo", "marketing"] and pauses.ends() == {}
        await asyncio.gather(*writes)
        assert await journal.paused() == {}
    finally:
        pauses.close()
        await journal.close()
