"""The agent runtime against the loopback Messages API, with the real anthropic SDK, the real
memory owner, spend book, journal and supervision tree (issue 5).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    PerAgent,
    agent_of,
    delegation_reviewed_once,
    running_company,
    tool_files,
    tool_results,
    tool_server,
    write_company,
)
from companyd.admin._results import DebugCrashed, ReloadApplied
from companyd.clock import ManualClock
from companyd.daemon._main import Daemon
from companyd.events import Event
from companyd.llm._model import Usage
from companyd.testing.messages_api import (
    MessagesAPIServer,
    bad_request,
    overloaded,
    reply_text,
    reply_tool_use,
    spend_limit,
    stall,
)

pytestmark = pytest.mark.anyio

TOOL_SERVER = Path(__file__).parent.parent / "mcp_tool_server.py"


def events_of(daemon: Daemon, kind: str) -> list[Event]:
    return daemon.bus.recent({kind}, limit=1000)


async def test_tool_use_loop_records_in_memory_and_prices_every_call(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    model = PerAgent(
        ceo=[
            reply_tool_use(
                "create_entities",
                {
                    "entities": [
                        {
                            "name": "Acme",
                            "entityType": "client",
                            "observations": ["signed in November"],
                        }
                    ]
                },
            ),
            reply_tool_use(
                "add_observations",
                {"observations": [{"entityName": "Acme", "contents": ["pays monthly"]}]},
            ),
            reply_text("Acme is recorded."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Record our new client Acme.")
            graph = await d.memory.call("open_nodes", {"names": ["Acme"]})
            spend = await d.spend("model", "today")
    assert out.status == "ok", out
    assert out.answer == "Acme is recorded."
    assert out.steps == 3 and srv.served == 3
    assert graph["entities"][0]["observations"] == ["signed in November", "pays monthly"]
    # every call was priced in the ledger, and the run's cost equals the ledger's
    assert out.cost_usd > 0
    assert spend.total["calls"] == 3
    assert spend.total["cost_usd"] == pytest.approx(out.cost_usd, abs=1e-9)
    # the stable prefix is marked for prompt caching
    body = srv.requests[0].body
    assert body["system"][-1].get("cache_control") or body["tools"][-1].get("cache_control")


async def test_consult_allowlist_cycle_and_depth(tmp_path: Path) -> None:
    cfg = write_company(
        tmp_path,
        {
            "ceo": {"consult": ["cfo"]},
            "cfo": {"reports_to": "ceo", "consult": ["ceo", "accountant"], "max_consult_depth": 1},
            "accountant": {"reports_to": "cfo"},
            "lawyer": {"reports_to": "ceo"},
        },
    )
    model = PerAgent(
        ceo=[
            reply_tool_use("consult", {"agent": "lawyer", "question": "Is this legal?"}),
            reply_tool_use("consult", {"agent": "cfo", "question": "What is our runway?"}),
            reply_text("Runway noted."),
        ],
        cfo=[
            reply_tool_use("consult", {"agent": "ceo", "question": "Which plan?"}),
            reply_tool_use("consult", {"agent": "accountant", "question": "Cash?"}),
            reply_text("About 14 months."),
        ],
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Check the runway with the CFO.")
    assert out.status == "ok", out
    by_agent = [(agent_of(r), tool_results(r)) for r in srv.requests]
    ceo_results = [res for a, res in by_agent if a == "ceo" and res]
    cfo_results = [res for a, res in by_agent if a == "cfo" and res]
    # allowlist: the CEO may not consult the lawyer
    assert ceo_results[0][0]["is_error"] is True
    assert "may not consult 'lawyer'" in ceo_results[0][0]["content"]
    # cycle: the CFO (consulted by the CEO) may not consult the CEO back
    assert cfo_results[0][0]["is_error"] is True
    assert "cycle refused: ceo → cfo → ceo" in cfo_results[0][0]["content"]
    # depth: ceo → cfo → accountant is deeper than the CFO's max_consult_depth of 1
    assert "too deep" in cfo_results[1][0]["content"]
    # the CEO got the CFO's answer
    assert ceo_results[1][0]["content"] == "About 14 months."
    assert "accountant" not in model.seen


async def test_delegation_with_a_reviewer_rejecting_once(tmp_path: Path) -> None:
    cfg, model = delegation_reviewed_once(tmp_path)
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Get a Q1 forecast from the CFO.")
            runs = (await d.runs(agent="cfo")).runs
    assert out.status == "ok", out
    delegated = [tool_results(r) for r in srv.requests if agent_of(r) == "ceo"][1][0]
    assert '"status": "ok"' in delegated["content"]
    assert "$42k" in delegated["content"]
    statuses = sorted((r["attempt"], r["status"], r["reason"] or "") for r in runs)
    assert statuses[0][:2] == (1, "failed")
    assert "rejected by coo: no number and no assumptions" in statuses[0][2]
    assert statuses[1][:2] == (2, "ok")
    # the second attempt saw the reviewer's feedback
    second = [r for r in srv.requests if agent_of(r) == "cfo"][1]
    assert "no number and no assumptions" in str(second.body["messages"][0]["content"])


async def test_fallback_to_the_next_model_on_529(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(overloaded(), reply_text("Served by the fallback."))
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Hello")
            fallbacks = events_of(d, "model_fallback")
    assert out.status == "ok"
    assert [r.body["model"] for r in srv.requests] == ["claude-sonnet-5-5", "claude-haiku-5-5"]
    assert out.models == ["claude-haiku-5-5"]
    assert len(fallbacks) == 1
    assert fallbacks[0].data["from_model"] == "claude-sonnet-5-5"
    assert fallbacks[0].data["to_model"] == "claude-haiku-5-5"


def _search(i: int) -> Any:
    return reply_tool_use("search_nodes", {"query": f"q{i}"})


BIG = Usage(input_tokens=40_000, output_tokens=2_000)


@pytest.mark.parametrize(
    ("limits", "script", "limit", "calls"),
    [
        ({"max_steps": 3}, [_search(i) for i in range(10)], "max_steps", 3),
        (
            {"max_tokens": 50_000},
            [reply_tool_use("search_nodes", {"query": f"q{i}"}, usage=BIG) for i in range(10)],
            "max_tokens",
            2,
        ),
        (
            {"max_cost_usd": 0.2},
            [reply_tool_use("search_nodes", {"query": f"q{i}"}, usage=BIG) for i in range(10)],
            "max_cost_usd",
            2,
        ),
        (
            {"loop_threshold": 3},
            [reply_tool_use("search_nodes", {"query": "same"}) for _ in range(10)],
            "loop",
            3,
        ),
    ],
)
async def test_each_breaker_trips_at_its_limit(
    tmp_path: Path, limits: dict[str, Any], script: list[Any], limit: str, calls: int
) -> None:
    cfg = write_company(tmp_path, {"ceo": {"limits": {"max_steps": 30, **limits}}})
    with MessagesAPIServer(responder=PerAgent(ceo=script)) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Search forever.")
            tripped = events_of(d, "circuit_breaker")
    assert out.status == "circuit_breaker", out
    assert srv.served == calls
    assert len(tripped) == 1 and tripped[0].data["limit"] == limit
    assert limit.split("_")[0] in str(out.reason)


async def test_max_seconds_breaker(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {"limits": {"max_seconds": 0.3, "max_steps": 30}}})
    script = [reply_tool_use("search_nodes", {"query": f"q{i}"}, latency=0.2) for i in range(10)]
    with MessagesAPIServer(responder=PerAgent(ceo=script)) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Search slowly.")
    assert out.status == "circuit_breaker"
    assert "max_seconds" in str(out.reason)
    assert srv.served < 10  # cut at 0.3 s, mid-call (test_max_seconds_cuts_a_call_in_flight)


async def test_max_seconds_cuts_a_call_in_flight(tmp_path: Path) -> None:
    # One model call outlasts the run's max_seconds: the run ends there, not whenever the
    # call returns (the heartbeat is longer, so it is not what ends it).
    cfg = write_company(
        tmp_path,
        {"ceo": {"heartbeat_seconds": 5, "limits": {"max_seconds": 0.5, "max_steps": 30}}},
    )
    model = PerAgent(ceo=[_search(1), stall(None, then=reply_text("too late"))])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            try:
                async with asyncio.timeout(20):
                    out = await d.ask("ceo", "Search, then think for ever.")
            finally:
                srv.release_stalls()
            tripped = events_of(d, "circuit_breaker")
            restarts = [e for e in events_of(d, "restart") if e.data.get("child") == "ceo"]
            spend = await d.budget()
            ledger = await d.spend("agent", "today")
            unanswered = events_of(d, "spend_unanswered")
    assert out.status == "circuit_breaker", out
    assert "max_seconds" in str(out.reason) and "cancelled" in str(out.reason)
    assert len(tripped) == 1 and tripped[0].data["limit"] == "max_seconds"
    assert restarts == []
    assert out.steps == 1 and srv.served == 1  # the second call was never answered
    assert spend.in_flight == 0  # its reservation is no longer open ...
    # ... it is kept as spent at its worst case (it may have been billed), and the run's
    # cost says so as the ledger does
    assert [e.data["reason"] for e in unanswered] == ["cancelled while the request was in flight"]
    assert out.cost_usd == pytest.approx(float(ledger.total["cost_usd_exact"]), abs=1e-9)


async def test_heartbeat_timeout_crashes_the_agent_and_the_restart_resumes(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {"heartbeat_seconds": 0.5}})
    model = PerAgent(
        ceo=[
            _search(1),
            stall(10.0, then=reply_text("too late")),
            reply_text("Done after the restart."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Do the thing.")
            restarts = [e for e in events_of(d, "restart") if e.data.get("child") == "ceo"]
            tasks = await d.journal.get_task(out.task_id)
    assert out.status == "ok", out
    assert out.answer == "Done after the restart."
    assert len(restarts) == 1
    assert tasks is not None and "HeartbeatTimeout" in tasks[3][0]
    # resumed from the journal: the first (completed) call was not made again
    assert out.steps == 2
    assert [agent_of(r) for r in srv.requests].count("ceo") == 3  # 1 ok, 1 abandoned, 1 ok


async def test_waiting_on_a_delegate_longer_than_the_heartbeat_is_not_a_stall(
    tmp_path: Path,
) -> None:
    # The CFO works for longer than the CEO's heartbeat_seconds; the CEO, waiting on its
    # delegate call, is not stuck (the CFO's own heartbeat watches the CFO's run).
    cfg = write_company(tmp_path, {"ceo": {"heartbeat_seconds": 0.5}, "cfo": {"reports_to": "ceo"}})
    model = PerAgent(
        ceo=[
            reply_tool_use("delegate", {"agent": "cfo", "task": "Forecast Q1."}),
            reply_text("Forecast received."),
        ],
        # the CFO's model call is held until the CEO's heartbeat has come due three times
        cfo=[stall(None, then=reply_text("$42k"))],
    )
    clock = ManualClock()
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            asking = asyncio.ensure_future(d.ask("ceo", "Get a Q1 forecast from the CFO."))
            async with asyncio.timeout(20):
                while not [r for r in srv.requests if agent_of(r) == "cfo"]:
                    await asyncio.sleep(0.01)
                for _ in range(3):
                    # the CEO's heartbeat check comes due; it finds the CEO waiting on its
                    # delegate (not stuck) and watches again, one heartbeat from now
                    clock.advance(0.5)
                    while clock.next_deadline() != clock.monotonic() + 0.5:
                        assert not asking.done(), asking
                        await asyncio.sleep(0.01)
            srv.release_stalls()
            out = await asyncio.wait_for(asking, 20)
            restarts = [e for e in events_of(d, "restart") if e.data.get("child") == "ceo"]
    assert out.status == "ok", out
    assert restarts == []
    delegated = [tool_results(r) for r in srv.requests if agent_of(r) == "ceo"][1][0]
    assert "is_error" not in delegated or delegated["is_error"] is False
    assert "$42k" in delegated["content"]


async def test_a_task_that_crashes_its_agent_twice_is_quarantined(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(
            bad_request("messages: text content blocks must be non-empty"),
            bad_request("messages: text content blocks must be non-empty"),
            reply_text("fine now"),
        )
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "A poison input.")
            quarantined = (await d.tasks(quarantined=True)).tasks
            events = events_of(d, "task_quarantined")
            # never retried automatically: nothing more was sent
            await asyncio.sleep(0.2)
            assert len(srv.requests) == 2
            released = await d.retry(out.task_id)
            async with asyncio.timeout(10):
                while srv.served < 1:
                    await asyncio.sleep(0.02)
    assert out.status == "quarantined", out
    assert "ModelBadRequest" in str(out.reason)
    assert [t["id"] for t in quarantined] == [out.task_id]
    assert len(quarantined[0]["errors"]) == 2
    assert len(events) == 1 and events[0].data["crashes"] == 2
    assert released.queued is True


async def test_an_agent_calls_a_tool_of_an_external_mcp_server(tmp_path: Path) -> None:
    log = tool_files(tmp_path) / "tool.log"
    cfg = write_company(
        tmp_path,
        {"marketing": {"mcp_servers": {"social": tool_server(log.parent, TOOL_LOG=str(log))}}},
    )
    model = PerAgent(
        marketing=[
            reply_tool_use("read_inbox", {}),
            reply_tool_use("post_update", {"text": "We launched!"}),
            reply_text("Posted."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("marketing", "Post the launch news.")
    assert out.status == "ok", out
    names = {t["name"] for t in srv.requests[0].body["tools"]}
    assert {"post_update", "read_inbox", "create_entities", "recall"} <= names
    results = [tool_results(r) for r in srv.requests[1:]]
    assert "move the launch to Friday" in results[0][0]["content"]
    assert results[1][0]["content"] == "posted: We launched!"
    assert log.read_text().splitlines() == ["started We launched!", "done We launched!"]


async def test_tools_allow_and_deny(tmp_path: Path) -> None:
    cfg = write_company(
        tmp_path,
        {
            "ceo": {
                "tools": {
                    "allow": ["search_nodes", "open_nodes", "delete_entities"],
                    "deny": ["delete_entities"],
                }
            }
        },
    )
    model = PerAgent(ceo=[reply_tool_use("create_entities", {"entities": []}), reply_text("ok")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            await d.ask("ceo", "Try a forbidden tool.")
    assert {t["name"] for t in srv.requests[0].body["tools"]} == {"search_nodes", "open_nodes"}
    result = tool_results(srv.requests[1])[0]
    assert result["is_error"] is True and "no tool named 'create_entities'" in result["content"]


async def test_the_api_spend_limit_pauses_every_agent(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {}, "cfo": {"reports_to": "ceo"}})
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(spend_limit())
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Anything.")
            after = await d.ask("cfo", "Anything else.")
            events = events_of(d, "api_spend_limit")
            paused = d.staff.paused()
    assert out.status == "budget_exhausted" and "spend limit" in str(out.reason)
    assert len(srv.requests) == 1  # not retried, and the fallback model was not tried either
    assert set(paused) == {"ceo", "cfo"}
    assert after.status == "cancelled" and "paused" in str(after.reason)
    assert len(events) == 1 and events[0].severity == "critical"


async def test_budget_refusal_ends_the_run_and_pauses_the_agent(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {"budget": {"daily_usd": 0.02}}})
    script = [reply_tool_use("search_nodes", {"query": f"q{i}"}) for i in range(20)]
    with MessagesAPIServer(responder=PerAgent(ceo=script)) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Spend it all.")
            budget = await d.budget()
            again = await d.ask("ceo", "More.")
            assert d.staff.paused()["ceo"].startswith("budget")
            raised = await d.raise_budget("ceo", 5.0)
    assert out.status == "budget_exhausted", out
    ceo_day = next(b for b in budget.budgets if b["agent"] == "ceo" and b["period"] == "day")
    assert ceo_day["used_usd"] <= 0.02
    assert again.status == "budget_exhausted" and again.steps == 0
    assert raised.resumed == ["ceo"]
    assert raised.daily_limit_usd == pytest.approx(5.02)
    assert raised.message == (
        "raised today's budget of ceo by $5.00 (today's limit is now $5.02; back to "
        "company.yaml tomorrow); resumed ceo"
    )


async def test_a_budget_raised_in_company_yaml_resumes_the_agent_it_paused(
    tmp_path: Path,
) -> None:
    # The refusal tells the operator to "increase it in company.yaml": doing so and
    # reloading lets the agent work again.
    cfg = write_company(tmp_path, {"ceo": {"budget": {"daily_usd": 0.02}}})
    script = [reply_tool_use("search_nodes", {"query": f"q{i}"}) for i in range(3)]
    with MessagesAPIServer(responder=PerAgent(ceo=script)) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Spend it all.")
            assert out.status == "budget_exhausted", out
            assert "increase it in company.yaml" in str(out.reason)
            assert "ceo" in d.staff.paused()
            write_company(tmp_path, {"ceo": {"budget": {"daily_usd": 5}}})
            reloaded = await d.reload()
            paused = d.staff.paused()
            again = await d.ask("ceo", "Go on.")
            resumed = events_of(d, "agent_resumed")
    assert isinstance(reloaded, ReloadApplied)
    assert reloaded.applied is True and reloaded.resumed == ["ceo"]
    assert paused == {}
    assert again.status == "ok", again
    assert [e.data["reason"] for e in resumed] == ["budget raised in company.yaml"]


async def test_an_injected_crash_restarts_the_agent_and_its_run_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPANYD_DEBUG", "1")
    cfg = write_company(tmp_path, {"ceo": {}})
    model = PerAgent(ceo=[_search(1), stall(None, then=_search(2)), _search(3), reply_text("ok")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            asking = asyncio.ensure_future(d.ask("ceo", "Three searches."))
            async with asyncio.timeout(10):
                while len(srv.requests) < 2:
                    await asyncio.sleep(0.01)
            crashed = await d.debug("crash", "ceo")
            assert isinstance(crashed, DebugCrashed) and crashed.crashed is True
            srv.release_stalls()
            async with asyncio.timeout(20):
                out = await asking
            restarts = [e for e in events_of(d, "restart") if e.data.get("child") == "ceo"]
            exits = [e for e in events_of(d, "child_exited") if e.data.get("child") == "ceo"]
            task = await d.journal.get_task(out.task_id)
    # the busy agent crashed at the end of the step in flight, so nothing was paid twice
    assert out.status == "ok" and out.steps == 4 and srv.served == 4
    assert len(restarts) == 1
    assert "InjectedCrash" in exits[0].data["reason"]
    assert task is not None and task[2] == 0  # not counted against the task


async def test_a_crash_asked_for_during_the_last_step_happens_when_the_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chaos run (seed 1): 8 crashes injected (``debug crash`` answered crashed: true),
    7 happened. A crash asked for while the run's last step was in flight waited for the
    next step, of a run that might never come before the daemon stopped. It now happens
    as the run ends, once its outcome is recorded.
    """
    monkeypatch.setenv("COMPANYD_DEBUG", "1")
    cfg = write_company(tmp_path, {"ceo": {}})
    model = PerAgent(ceo=[stall(None, then=reply_text("done"))])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            asking = asyncio.ensure_future(d.ask("ceo", "One answer."))
            async with asyncio.timeout(10):
                while len(srv.requests) < 1:
                    await asyncio.sleep(0.01)
            crashed = await d.debug("crash", "ceo")
            assert isinstance(crashed, DebugCrashed) and crashed.crashed is True
            srv.release_stalls()
            async with asyncio.timeout(20):
                out = await asking
                while not [e for e in events_of(d, "child_exited") if e.data.get("child") == "ceo"]:
                    await asyncio.sleep(0.01)
            exits = [e for e in events_of(d, "child_exited") if e.data.get("child") == "ceo"]
            task = await d.journal.get_task(out.task_id)
    assert out.status == "ok" and out.answer == "done" and srv.served == 1
    assert "InjectedCrash" in exits[0].data["reason"]
    assert task is not None and task[2] == 0  # not counted against the task


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
async def test_two_crashes_asked_in_the_same_instant_answer_one_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, busy: bool
) -> None:
    """Chaos run (week 2 on c147275): a driver catching up fired two ``debug crash`` of one
    agent in the same instant; both answered crashed: true, one crash happened. The
    second request adds no crash, so it answers false.
    """
    monkeypatch.setenv("COMPANYD_DEBUG", "1")
    cfg = write_company(tmp_path, {"ceo": {}})
    model = PerAgent(ceo=[stall(None, then=reply_text("done"))])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            asking = None
            if busy:
                asking = asyncio.ensure_future(d.ask("ceo", "One answer."))
                async with asyncio.timeout(10):
                    while len(srv.requests) < 1:
                        await asyncio.sleep(0.01)
            answers = await asyncio.gather(d.debug("crash", "ceo"), d.debug("crash", "ceo"))
            srv.release_stalls()
            async with asyncio.timeout(20):
                if asking is not None:
                    await asking
                while not [e for e in events_of(d, "restart") if e.data.get("child") == "ceo"]:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # a second crash, were there one, would show by now
            again = await d.debug("crash", "ceo")  # the restarted agent crashes anew
            exits = [e for e in events_of(d, "child_exited") if e.data.get("child") == "ceo"]
    assert [a.crashed for a in answers if isinstance(a, DebugCrashed)] == [True, False]
    assert len(exits) == 1
    assert isinstance(again, DebugCrashed) and again.crashed is True


async def test_cutting_a_step_short_never_swallows_a_stop_aimed_at_the_agent() -> None:
    """A run cut at max_seconds or a heartbeat stall cancels its step and waits for it. A
    supervisor stopping the agent during that wait must still stop it: only the step's own
    cancellation (and its errors) are absorbed.
    """
    from companyd.agents._run import (
        cancel_and_reap,
    )

    winding_down = asyncio.Event()

    async def slow_to_wind_down() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            winding_down.set()
            await asyncio.sleep(3600)  # cleanup that takes a while (cancelled again below)
            raise

    async with asyncio.timeout(5):
        work = asyncio.create_task(slow_to_wind_down())
        await asyncio.sleep(0)
        reaper = asyncio.create_task(cancel_and_reap(work, "cfo"))
        await winding_down.wait()
        reaper.cancel()  # the supervisor stops the agent while it waits for the step
        with pytest.raises(asyncio.CancelledError):
            await reaper
        assert work.cancelled()

        async def fails_when_cut() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                raise RuntimeError("broke while being cut") from None

        for body in (asyncio.sleep(3600), fails_when_cut()):
            step = asyncio.create_task(body)
            await asyncio.sleep(0)
            await cancel_and_reap(step, "cfo")  # absorbed: returns normally
            assert step.done()
