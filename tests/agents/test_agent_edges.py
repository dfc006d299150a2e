"""Edge cases of the tool-use loop the main agent tests do not reach: several tool calls in
one response, unusual stop reasons, provider errors, crashes in odd places (checker pass).

Real daemon in-process, real anthropic SDK against the loopback Messages API stand-in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from agentkit import PerAgent, running_company, tool_results, write_company
from companyd.admin._results import AskAnswer
from companyd.daemon._main import Daemon
from companyd.events import Event
from companyd.llm._model import Usage
from companyd.testing.messages_api import (
    MessagesAPIServer,
    Reply,
    fault,
    overloaded,
    reply_text,
    reply_tool_use,
    stall,
)

pytestmark = pytest.mark.anyio


def events_of(daemon: Daemon, kind: str) -> list[Event]:
    return daemon.bus.recent({kind}, limit=1000)


def tool_uses(*calls: tuple[str, dict[str, Any]]) -> Reply:
    """One response asking for several tools at once."""
    return Reply(
        content=tuple(
            {"type": "tool_use", "id": f"toolu_multi_{i}", "name": n, "input": a}
            for i, (n, a) in enumerate(calls)
        ),
        stop_reason="tool_use",
        usage=Usage(input_tokens=10, output_tokens=20),
    )


async def ask(d: Any, agent: str, prompt: str, limit: float = 30) -> AskAnswer:
    async with asyncio.timeout(limit):
        out: AskAnswer = await d.ask(agent, prompt)
        return out


async def test_several_tool_calls_in_one_response_all_answered_in_order(tmp_path: Path) -> None:
    # one good call, one denied tool, one hallucinated name, one failing tool (ToolError)
    cfg = write_company(tmp_path, {"ceo": {"tools": {"deny": ["delete_entities"]}}})
    model = PerAgent(
        ceo=[
            tool_uses(
                ("search_nodes", {"query": "x"}),
                ("delete_entities", {"entityNames": ["x"]}),
                ("launch_rocket", {}),
                ("recall", {"entity": ""}),
            ),
            reply_text("done"),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await ask(d, "ceo", "Do four things.")
    assert out.status == "ok", out
    results = tool_results(srv.requests[1])
    assert [r["tool_use_id"] for r in results] == [f"toolu_multi_{i}" for i in range(4)]
    assert [bool(r.get("is_error")) for r in results] == [False, True, True, True]
    assert "no tool named 'delete_entities'" in results[1]["content"]
    assert "no tool named 'launch_rocket'" in results[2]["content"]


async def test_refusal_fails_the_run_and_an_empty_answer_is_ok(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {}, "cfo": {"reports_to": "ceo"}})
    model = PerAgent(
        ceo=[reply_text("I can't help with that.", stop_reason="refusal")],
        cfo=[Reply(content=(), stop_reason="end_turn")],
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            refused = await ask(d, "ceo", "Something bad.")
            empty = await ask(d, "cfo", "Say nothing.")
    assert refused.status == "failed" and "refused" in str(refused.reason)
    assert empty.status == "ok" and empty.answer == ""


async def test_pause_turn_then_a_crash_resumes_the_paused_turn(tmp_path: Path) -> None:
    # The model paused its turn (a long server-side step); the next call stalls past the
    # heartbeat, the agent crashes and restarts. The resumed run must carry on the paused
    # turn, not end with the half answer the pause left.
    cfg = write_company(tmp_path, {"ceo": {"heartbeat_seconds": 0.5}})
    model = PerAgent(
        ceo=[
            reply_text("Let me think about this", stop_reason="pause_turn"),
            stall(10.0, then=reply_text("too late")),
            reply_text("The whole answer."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await ask(d, "ceo", "Think hard.")
    assert out.answer == "The whole answer.", out
    assert out.status == "ok" and out.steps == 2


async def test_max_tokens_inside_a_tool_call_ends_the_run_truncated(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    truncated = Reply(
        content=(
            {"type": "text", "text": "I will search"},
            {"type": "tool_use", "id": "toolu_cut", "name": "search_nodes", "input": {}},
        ),
        stop_reason="max_tokens",
    )
    with MessagesAPIServer(responder=PerAgent(ceo=[truncated])) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await ask(d, "ceo", "Search.")
    assert out.status == "ok" and "truncated" in str(out.reason)
    assert srv.served == 1


async def test_overload_on_every_model_fails_naming_each(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(overloaded(), overloaded())
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await ask(d, "ceo", "Hello")
            restarts = [e for e in events_of(d, "restart") if e.data.get("child") == "ceo"]
    assert out.status == "failed", out
    assert "claude-sonnet-5-5: ModelOverloaded" in str(out.reason)
    assert "claude-haiku-5-5: ModelOverloaded" in str(out.reason)
    assert restarts == []


class _Boom(BaseException):
    """Not an Exception (as a library's own BaseException subclass may be)."""


@pytest.mark.parametrize(
    "error",
    [_Boom("a tool broke badly"), asyncio.CancelledError("cancel scope leaked out of a tool")],
    ids=["base_exception", "stray_cancelled_error"],
)
async def test_a_tool_raising_a_base_exception_ends_in_quarantine(
    tmp_path: Path, error: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    model = PerAgent(ceo=[reply_tool_use("search_nodes", {"query": "x"}) for _ in range(5)])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:

            async def explode(
                name: str, arguments: Mapping[str, Any], *, by: str | None = None
            ) -> dict[str, Any]:
                raise error

            monkeypatch.setattr(d.staff.memory, "call", explode)
            out = await ask(d, "ceo", "Search.")

            def restarts() -> list[Event]:
                return [e for e in events_of(d, "restart") if e.data.get("child") == "ceo"]

            # The task is quarantined at the second crash, before that crash reaches the
            # supervisor: the answer may come before or after its restart. Each crash
            # restarts the agent once; none after (the quarantined task is not retried).
            async with asyncio.timeout(10):
                while len(restarts()) < 2:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            count = len(restarts())
    assert out.status == "quarantined", out
    assert type(error).__name__ in str(out.reason)
    assert count == 2
    assert srv.served == 1  # the completed model call was never paid twice


async def test_a_tool_crashing_its_agent_takes_its_sibling_calls_down_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two tool calls in one response; one raises a bug (not a ToolError) and crashes the
    # agent. The other, still running, must not outlive the crashed instance: the restarted
    # agent re-runs it (idempotent) and it completes exactly once.
    cfg = write_company(tmp_path, {"ceo": {}})
    model = PerAgent(
        ceo=[tool_uses(("search_nodes", {"query": "x"}), ("open_nodes", {"names": ["x"]}))]
    )
    completed: list[str] = []
    failed_once: list[bool] = []
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:

            async def flaky(
                name: str, arguments: Mapping[str, Any], *, by: str | None = None
            ) -> dict[str, Any]:
                if name == "search_nodes" and not failed_once:
                    failed_once.append(True)
                    raise RuntimeError("a bug in a tool")
                if name == "open_nodes":
                    await asyncio.sleep(0.5)
                completed.append(name)
                return {"entities": [], "relations": []}

            monkeypatch.setattr(d.staff.memory, "call", flaky)
            out = await ask(d, "ceo", "Look twice.")
            await asyncio.sleep(1.0)  # time for an orphaned call to finish, if one survived
    assert out.status == "ok", out
    assert sorted(completed) == ["open_nodes", "search_nodes"]
    assert srv.served == 2


async def test_a_refused_key_pauses_every_agent_once_and_blames_no_task(tmp_path: Path) -> None:
    # A bad key is not a poison input: quarantining each task in turn (two crashes each)
    # would page the operator per task and leave them to retry every one after the fix.
    cfg = write_company(tmp_path, {"ceo": {}, "cfo": {"reports_to": "ceo"}})
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(fault(401, "invalid x-api-key"))
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await ask(d, "ceo", "Hello")
            after = await ask(d, "cfo", "Anything else.")
            refused = events_of(d, "api_key_refused")
            restarts = events_of(d, "restart")
            quarantined = (await d.tasks(quarantined=True)).tasks
            paused = d.staff.paused()
    assert out.status == "failed" and "refused the API key" in str(out.reason), out
    assert "restart companyd" in str(out.reason)
    # not retried, not sent to the fallback model, and the agent was not crashed to try again
    assert [r.body["model"] for r in srv.requests] == ["claude-sonnet-5-5"]
    assert "check the API key" in str(out.reason)
    assert restarts == [] and quarantined == []
    assert set(paused) == {"ceo", "cfo"}
    assert after.status == "cancelled" and "API key refused" in str(after.reason)
    assert len(refused) == 1 and refused[0].severity == "critical"
    assert refused[0].data["paused"] == ["ceo", "cfo"]
