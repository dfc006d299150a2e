"""Colleague waits end, and when the asker stops waiting the colleague's task is withdrawn:
taken out of the mailbox, or its run cancelled — no agent works (and spends) for nobody.
The real daemon in-process, the real anthropic SDK against the loopback Messages API.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentkit import PerAgent, agent_of, running_company, tool_results, write_company
from companyd.admin._blocks import RunRow
from companyd.admin._results import ReloadApplied, Runs
from companyd.agents._calls import STOP_CALL_GRACE
from companyd.agents._tools import ToolCallContext
from companyd.clock import ManualClock
from companyd.runs import Journal, Task, new_id
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use, stall

pytestmark = pytest.mark.anyio


def requests_of(srv: MessagesAPIServer, agent: str) -> list[Any]:
    return [r for r in srv.requests if agent_of(r) == agent]


async def runs_of(d: Any, agent: str) -> list[RunRow]:
    runs: Runs = await d.runs(agent=agent, limit=50)
    return list(runs.runs)


async def ended_runs_of(d: Any, agent: str) -> list[RunRow]:
    """``agent``'s runs once it has one and none is still running (10 s at most)."""
    async with asyncio.timeout(10):
        while not (runs := await runs_of(d, agent)) or any(r["status"] == "running" for r in runs):
            await asyncio.sleep(0.05)
    return runs


async def advance_when_due(clock: ManualClock, seconds: float, ready: Any) -> None:
    """Once ``ready()`` holds and the clock's next wake-up is ``seconds`` ahead (the wait
    under test has begun), move the clock to it.
    """
    async with asyncio.timeout(20):
        while not ready() or clock.next_deadline() != clock.monotonic() + seconds:
            await asyncio.sleep(0.01)
    clock.advance(seconds)


def ceo_consults_cfo(cfo_script: list[Any]) -> tuple[dict[str, Any], PerAgent]:
    """A CEO that consults the CFO once, waiting 0.5 s at most, then answers itself."""
    agents = {
        "ceo": {"consult": ["cfo"], "colleague_timeout_seconds": 0.5},
        "cfo": {"reports_to": "ceo"},
    }
    model = PerAgent(
        ceo=[
            reply_tool_use("consult", {"agent": "cfo", "question": "What is our runway?"}),
            reply_text("I will estimate it myself."),
        ],
        cfo=cfo_script,
    )
    return agents, model


async def test_a_consultation_past_its_timeout_cancels_the_colleagues_run(
    tmp_path: Path,
) -> None:
    # the CFO's model call hangs far longer than the CEO waits
    agents, model = ceo_consults_cfo([stall(30, then=reply_text("14 months"))])
    cfg = write_company(tmp_path, agents)
    clock = ManualClock()
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            asking = asyncio.ensure_future(d.ask("ceo", "Check the runway with the CFO."))
            # the CFO's call is in flight and the CEO waits: its 0.5 s pass
            await advance_when_due(clock, 0.5, lambda: requests_of(srv, "cfo"))
            out = await asyncio.wait_for(asking, 20)
            cfo_runs = await ended_runs_of(d, "cfo")
            await asyncio.sleep(0.3)  # time for a run that was not cancelled to go on
            open_tasks = (await d.tasks()).tasks
    assert out.status == "ok", out
    result = [tool_results(r) for r in requests_of(srv, "ceo")][1][0]
    assert result["is_error"] is True
    assert "cfo did not answer within 0.5 s; the task was withdrawn" in result["content"]
    # the CFO's run was cancelled in its model call, with the reason, and not retried
    assert [r["status"] for r in cfo_runs] == ["cancelled"]
    assert "withdrawn: the asker stopped waiting" in str(cfo_runs[0]["reason"])
    assert len(requests_of(srv, "cfo")) == 1
    assert open_tasks == []


async def test_a_wait_whose_outcome_is_cancelled_is_not_called_a_timeout(tmp_path: Path) -> None:
    """The callers' futures are cancelled only as the daemon closes (Staff.close), after
    the tree's stop ended every wait: a wait that still sees it is a broken order, said as
    such — not "cfo did not answer within 0.5 s", which no clock measured.
    """
    agents, model = ceo_consults_cfo([stall(None, then=reply_text("14 months"))])
    cfg = write_company(tmp_path, agents)
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=ManualClock()) as d:
            ceo = d.config.agents["ceo"]
            ctx = ToolCallContext(agent="ceo", run_id=new_id("run"), task_id=new_id("task"))
            asking = asyncio.ensure_future(d.staff.colleagues.consult(ceo, "cfo", "Runway?", ctx))
            async with asyncio.timeout(20):
                while not requests_of(srv, "cfo"):
                    await asyncio.sleep(0.01)
            d.staff.mailboxes.cancel_waiters()  # what Staff.close() does to them
            with pytest.raises(AssertionError, match="cancelled under a waiting run"):
                await asyncio.wait_for(asking, 20)
            srv.release_stalls()


async def test_a_consultation_still_queued_at_its_timeout_never_runs_even_after_a_restart(
    tmp_path: Path,
) -> None:
    # the CFO is busy with another task (its model call held until the CEO's wait is over)
    # while the CEO's question waits in its mailbox
    agents, model = ceo_consults_cfo([stall(None, then=reply_text("books closed"))])
    cfg = write_company(tmp_path, agents)
    state = tmp_path / "state"
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, state, srv) as d:
            busy = asyncio.create_task(d.ask("cfo", "Close the books."))
            async with asyncio.timeout(10):
                while not requests_of(srv, "cfo"):
                    await asyncio.sleep(0.02)
            out = await d.ask("ceo", "Check the runway with the CFO.")
            assert not busy.done()  # the CFO was busy all the while the CEO waited
            srv.release_stalls()
            first = await busy
            await asyncio.sleep(0.3)  # the CFO is free now: a queued consultation would run
            cfo_runs = await runs_of(d, "cfo")
            open_tasks = (await d.tasks()).tasks
        # and a restart does not bring it back from the journal
        async with running_company(cfg, state, srv) as d:
            await asyncio.sleep(0.3)
            open_after_restart = (await d.tasks()).tasks
    assert out.status == "ok", out
    assert first.status == "ok" and first.answer == "books closed"
    result = [tool_results(r) for r in requests_of(srv, "ceo")][1][0]
    assert result["is_error"] is True and "the task was withdrawn" in result["content"]
    # the CFO made one model call (its own task); the consultation never started
    assert len(requests_of(srv, "cfo")) == 1
    assert [r["status"] for r in cfo_runs] == ["ok"]
    assert open_tasks == [] and open_after_restart == []


async def test_a_stopped_asker_withdraws_the_task_it_was_waiting_on(tmp_path: Path) -> None:
    # The CEO's run hits max_seconds while it waits on the CFO: the CEO stopped waiting, so
    # the CFO's run is cancelled too instead of finishing for nobody.
    cfg = write_company(
        tmp_path,
        {"ceo": {"consult": ["cfo"], "limits": {"max_seconds": 1}}, "cfo": {"reports_to": "ceo"}},
    )
    model = PerAgent(
        ceo=[reply_tool_use("consult", {"agent": "cfo", "question": "What is our runway?"})],
        cfo=[stall(30, then=reply_text("14 months"))],
    )
    clock = ManualClock()
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            asking = asyncio.ensure_future(d.ask("ceo", "Check the runway with the CFO."))
            # the CFO's call is in flight; the CEO's run reaches its max_seconds
            await advance_when_due(clock, 1, lambda: requests_of(srv, "cfo"))
            out = await asyncio.wait_for(asking, 20)
            cfo_runs = await ended_runs_of(d, "cfo")
    assert out.status == "circuit_breaker", out
    assert [r["status"] for r in cfo_runs] == ["cancelled"]
    assert "withdrawn: the asking run was stopped" in str(cfo_runs[0]["reason"])
    assert len(requests_of(srv, "cfo")) == 1


async def test_a_reviewer_that_does_not_answer_in_time_fails_the_attempt_without_a_crash(
    tmp_path: Path,
) -> None:
    cfg = write_company(
        tmp_path,
        {
            "ceo": {},
            "cfo": {"reports_to": "ceo", "colleague_timeout_seconds": 0.5},
            "coo": {"reports_to": "ceo"},
        },
    )
    model = PerAgent(
        ceo=[
            reply_tool_use(
                "delegate",
                {"agent": "cfo", "task": "Forecast Q1 revenue.", "reviewer": "coo"},
            ),
            reply_text("Noted."),
        ],
        cfo=[reply_text("$42k"), reply_text("$42k")],
        coo=[stall(30, then=reply_text("APPROVE")), stall(30, then=reply_text("APPROVE"))],
    )
    clock = ManualClock()
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            asking = asyncio.ensure_future(d.ask("ceo", "Get a Q1 forecast from the CFO."))
            reviews = 0
            async with asyncio.timeout(30):
                while not asking.done():
                    # each review the CFO waits for is in flight: its 0.5 s pass
                    if len(requests_of(srv, "coo")) > reviews and (
                        clock.next_deadline() == clock.monotonic() + 0.5
                    ):
                        reviews += 1
                        clock.advance(0.5)
                    await asyncio.sleep(0.01)
            out = asking.result()
            restarts = list(d.bus.recent({"restart"}, limit=100))
            coo_runs = await ended_runs_of(d, "coo")
    assert out.status == "ok", out
    delegated = [tool_results(r) for r in requests_of(srv, "ceo")][1][0]
    assert '"status": "failed"' in delegated["content"]
    assert "the review could not be done" in delegated["content"]
    assert "reviewer coo did not answer within 0.5 s" in delegated["content"]
    # no verdict is a failed attempt, not a crash of the worker
    assert restarts == []
    # every review the worker stopped waiting for was cancelled, none left running
    assert coo_runs and {r["status"] for r in coo_runs} == {"cancelled"}


async def test_a_consultation_left_open_by_a_restart_is_withdrawn_not_run(
    tmp_path: Path,
) -> None:
    # The previous process died while the CEO waited on the CFO: a consultation still
    # queued and one mid-run are in the journal. The CEO's own run resumes with "outcome
    # unknown" for that call, so nobody would read the answers: they are withdrawn at start.
    # A task the operator queued is kept and runs.
    cfg = write_company(tmp_path, {"ceo": {"consult": ["cfo"]}, "cfo": {"reports_to": "ceo"}})
    state = tmp_path / "state"
    journal = Journal(state / "runs.sqlite")
    await journal.open()
    queued, running = (
        Task(
            id=new_id("consult"),
            agent="cfo",
            prompt=prompt,
            source="agent:ceo",
            created=created,
            consult_chain=("ceo",),
        )
        for prompt, created in (("What is our runway?", 1.0), ("And the burn?", 2.0))
    )
    kept = Task(
        id=new_id("task"), agent="cfo", prompt="Close the books.", source="operator", created=3.0
    )
    # and a task of an agent since removed from company.yaml: closed, not left queued
    orphan = Task(id=new_id("task"), agent="cto", prompt="Patch.", source="operator", created=4.0)
    for t in (queued, running, kept, orphan):
        await journal.add_task(t, t.created)
    await journal.start_run(running, new_id("run"), 1, 2.0)
    await journal.close()

    model = PerAgent(cfo=[reply_text("books closed")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, state, srv) as d:
            async with asyncio.timeout(10):
                while not requests_of(srv, "cfo"):
                    await asyncio.sleep(0.02)
            cfo_runs = await ended_runs_of(d, "cfo")
            await asyncio.sleep(0.3)  # a consultation that was restored would run now
            open_tasks = (await d.tasks()).tasks
    prompts = [str(r.body) for r in requests_of(srv, "cfo")]
    assert len(prompts) == 1 and "Close the books." in prompts[0]
    by_task = {r["task_id"]: r for r in cfo_runs}
    assert by_task[running.id]["status"] == "cancelled"
    assert "the daemon restarted" in str(by_task[running.id]["reason"])
    assert by_task[kept.id]["status"] == "ok"
    assert queued.id not in by_task
    assert open_tasks == []


async def test_removing_an_agent_withdraws_its_tasks_and_ends_every_wait(tmp_path: Path) -> None:
    # The CFO is removed from company.yaml while it runs one task and has another queued:
    # both askers get an answer (cancelled, with the reason) instead of waiting forever, and
    # the journal closes both, so a CFO added again later does not inherit them.
    cfg = write_company(tmp_path, {"ceo": {}, "cfo": {"reports_to": "ceo"}})
    # its model call is held until the reload's stop of the CFO has begun (the call's
    # STOP_CALL_GRACE on the daemon's clock): it answers within that grace, and the reload
    # stops the CFO at the end of that step
    model = PerAgent(cfo=[stall(None, then=reply_tool_use("search_nodes", {"query": "books"}))])
    clock = ManualClock()
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            running = asyncio.create_task(d.ask("cfo", "Close the books.", timeout=60))
            async with asyncio.timeout(10):
                while not requests_of(srv, "cfo"):
                    await asyncio.sleep(0.02)
            queued = asyncio.create_task(d.ask("cfo", "And the forecast.", timeout=60))
            async with asyncio.timeout(10):
                while d.staff.inbox_size("cfo") < 1:
                    await asyncio.sleep(0.02)
            write_company(tmp_path, {"ceo": {}})
            reloading = asyncio.create_task(d.reload())
            async with asyncio.timeout(10):
                while clock.next_deadline() != clock.monotonic() + STOP_CALL_GRACE:
                    assert not reloading.done(), reloading
                    await asyncio.sleep(0.01)
            srv.release_stalls()
            reloaded = await reloading
            async with asyncio.timeout(20):
                outcomes = [await running, await queued]
            await asyncio.sleep(0.2)  # the journal write is queued behind the reload
            cfo_runs = await runs_of(d, "cfo")
            open_tasks = (await d.tasks()).tasks
    assert isinstance(reloaded, ReloadApplied)
    assert reloaded.removed == ["cfo"]
    for out in outcomes:
        assert out.status == "cancelled", out
        assert "removed from company.yaml" in str(out.reason)
    assert [r["status"] for r in cfo_runs] == ["cancelled"]
    assert "removed from company.yaml" in str(cfo_runs[0]["reason"])
    assert open_tasks == []
    assert len(requests_of(srv, "cfo")) == 1


async def test_a_review_in_flight_at_a_stop_is_cut_at_once_and_asked_again(
    tmp_path: Path,
) -> None:
    """The daemon stops while the reviewer's model call is in flight: the restart withdraws
    reviews (the resumed worker asks for a new one), so that call's answer would be thrown
    away — it gets no STOP_CALL_GRACE: the stop cancels it at once (kept as spent, since it
    may have been billed). After the restart the review is asked again, and the worker's
    result reaches the delegating CEO once.
    """
    cfg = write_company(
        tmp_path, {"ceo": {}, "cfo": {"reports_to": "ceo"}, "coo": {"reports_to": "ceo"}}
    )
    model = PerAgent(
        ceo=[
            reply_tool_use(
                "delegate",
                {"agent": "cfo", "task": "Forecast Q1 revenue.", "reviewer": "coo"},
            ),
            reply_text("Forecast received."),
        ],
        cfo=[reply_text("$42k: 35 clinics at $1.2k.")],
        # the first review is held until released (after the stop)
        coo=[stall(None, then=reply_text("APPROVE: thrown away")), reply_text("APPROVE")],
    )
    state = tmp_path / "state"
    clock = ManualClock()
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, state, srv, clock=clock) as d:
            asking = asyncio.ensure_future(d.ask("ceo", "Get a Q1 forecast from the CFO."))
            async with asyncio.timeout(20):
                while not requests_of(srv, "coo"):
                    await asyncio.sleep(0.01)
            stopping = asyncio.ensure_future(d.stop())
            async with asyncio.timeout(10):  # the daemon's clock never moves
                while not stopping.done():
                    # no grace begun for an answer the restart would throw away
                    assert clock.next_deadline() != clock.monotonic() + STOP_CALL_GRACE
                    await asyncio.sleep(0.005)
            await stopping
            unanswered = [e.data for e in d.bus.recent({"spend_unanswered"}, limit=10)]
            asking.cancel()
        srv.release_stalls()
        [cut] = requests_of(srv, "coo")
        async with asyncio.timeout(5):  # the stand-in saw the client leave
            while cut.outcome == "pending":
                await asyncio.sleep(0.01)
        journal = Journal(state / "runs.sqlite")
        await journal.open()
        try:
            [review_run] = await journal.runs(agent="coo")
            review_steps = await journal.steps(review_run["run_id"])
        finally:
            await journal.close()
        async with running_company(cfg, state, srv, clock=ManualClock()) as d:
            ceo_runs = await ended_runs_of(d, "ceo")
            coo_runs = await ended_runs_of(d, "coo")
    assert cut.outcome == "abandoned"
    assert [(u["agent"], u["reason"]) for u in unanswered] == [
        ("coo", "cancelled while the request was in flight")
    ]
    assert [s for s in review_steps if s.kind == "llm"] == []  # nothing journaled of it
    # after the restart: the review asked again (the cut one withdrawn), the result once
    assert sorted(r["status"] for r in coo_runs) == ["cancelled", "ok"]
    assert [r["status"] for r in ceo_runs] == ["ok"]
    assert ceo_runs[0]["answer"] == "Forecast received."
    assert len(requests_of(srv, "cfo")) == 1  # the forecast was not made again
    ceo_calls = requests_of(srv, "ceo")
    assert len(ceo_calls) == 2
    [delegated] = tool_results(ceo_calls[1])
    assert '"status": "ok"' in delegated["content"] and "$42k" in delegated["content"]
    assert len(requests_of(srv, "coo")) == 2
