"""Evidence for "done" (issue 27): a final answer is checked against the run's own journaled
steps — a routine's ``done_when`` and, with no configuration, the claim check. The real
daemon in-process, the real anthropic SDK against the Messages API stand-in, a real MCP
tool server over stdio.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    PerAgent,
    agent_of,
    running_company,
    tool_files,
    tool_results,
    tool_server,
    write_company,
)
from companyd.admin._results import DebugCrashed
from companyd.alerts._render_kinds import render
from companyd.daemon._metrics import Metrics
from companyd.runs import Task, new_id
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use, stall

pytestmark = pytest.mark.anyio


def _tool_log(directory: Path) -> Path:
    """Where the sandboxed test tool server logs its calls (a directory it may write)."""
    return directory / "tool-files" / "tool.log"


MEMORY_WHY = "the answer says it saved to the company memory, but the run wrote nothing to it"
POSTED = {"tool": "post_update", "result_matches": "posted id=\\d+"}


def _company(tmp_path: Path) -> Path:
    return write_company(
        tmp_path,
        {
            "marketing": {
                "mcp_servers": {
                    "social": tool_server(
                        tool_files(tmp_path), TOOL_LOG=str(_tool_log(tmp_path)), TOOL_POST_ID="7"
                    )
                }
            }
        },
    )


def _task(done_when: list[dict[str, Any]], on_unmet: str = "retry") -> Task:
    return Task(
        id=new_id("task"),
        agent="marketing",
        prompt="Post today's update.",
        source="routine:daily-post",
        created=0.0,
        routine="daily-post",
        done_when=tuple(done_when),
        on_unmet=on_unmet,
    )


async def test_done_when_unmet_retried_once_then_unverified(tmp_path: Path) -> None:
    model = PerAgent(marketing=[reply_text("Done — posted."), reply_text("Done — posted.")])
    metrics = Metrics()
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(_company(tmp_path), tmp_path / "s", srv) as d:
            metrics.attach(d.bus)
            out = await d.staff.submit(_task([POSTED]))
            shown = await d.journal.transcript(out.run_id)
            metrics.detach()
            [finished] = d.bus.recent({"run_finished"})
    # the run finished (not failed): status unverified, why, and the metric by outcome
    assert finished.data["status"] == "unverified" and finished.data["reason"] == out.reason
    runs = [ln for ln in metrics.render().decode().splitlines() if ln.startswith("companyd_runs_")]
    assert 'companyd_runs_total{agent="marketing",outcome="unverified"} 1.0' in runs, runs
    assert out.status == "unverified", out
    assert out.reason == ("no successful call of post_update; the answer says 'posted'")
    assert srv.served == 2  # one follow-up, in the same run
    follow = srv.requests[1].body["messages"][-1]["content"]
    assert "your answer says it was posted, but no call of post_update succeeded" in follow
    assert "or say plainly that it could not be done" in follow
    assert shown is not None
    assert [s["kind"] for s in shown["steps"]] == ["model", "verification", "model", "verification"]
    v = shown["verification"]
    assert v["met"] is False and v["follow_up"] is None
    [check] = v["checks"]
    assert check["met"] is False and check["source"] == "done_when"


async def test_done_when_met_is_ok_with_the_call_as_evidence(tmp_path: Path) -> None:
    model = PerAgent(
        marketing=[reply_tool_use("post_update", {"text": "We launch!"}), reply_text("Posted.")]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(_company(tmp_path), tmp_path / "s", srv) as d:
            out = await d.staff.submit(_task([POSTED]))
            shown = await d.journal.transcript(out.run_id)
    assert out.status == "ok", out
    assert shown is not None
    [check] = shown["verification"]["checks"]
    assert check["met"] is True
    assert check["step"] == 2  # the transcript's tool step
    assert "posted id=7: We launch!" in check["evidence"]


async def test_the_retry_does_the_work_and_both_attempts_show(tmp_path: Path) -> None:
    model = PerAgent(
        marketing=[
            reply_text("Done — posted."),
            reply_tool_use("post_update", {"text": "We launch!"}),
            reply_text("Posted it for real this time."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(_company(tmp_path), tmp_path / "s", srv) as d:
            out = await d.staff.submit(_task([POSTED]))
            shown = await d.journal.transcript(out.run_id)
    assert out.status == "ok", out
    assert shown is not None
    kinds = [s["kind"] for s in shown["steps"]]
    assert kinds == ["model", "verification", "model", "tool", "model", "verification"]
    assert shown["steps"][0]["text"] == "Done — posted."
    assert shown["steps"][1]["follow_up"]
    assert shown["verification"]["met"] is True


async def test_report_does_not_retry(tmp_path: Path) -> None:
    model = PerAgent(marketing=[reply_text("Done — posted.")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(_company(tmp_path), tmp_path / "s", srv) as d:
            out = await d.staff.submit(_task([POSTED], on_unmet="report"))
    assert out.status == "unverified"
    assert srv.served == 1


async def test_a_memory_claim_without_a_write_is_unverified_with_no_configuration(
    tmp_path: Path,
) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    said = "Noted: I saved it in the company memory."
    model = PerAgent(ceo=[reply_text(said), reply_text(said)])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "s", srv) as d:
            out = await d.ask("ceo", "Remember that Acme pays late.")
    assert out.status == "unverified", out
    assert out.reason == (
        "the answer says it saved to the company memory, but the run wrote nothing to it"
    )


async def test_limits_apply_to_the_follow_up(tmp_path: Path) -> None:
    cfg = _company(tmp_path)
    text = cfg.read_text().replace("max_steps: 30", "max_steps: 1")
    cfg.write_text(text)
    model = PerAgent(marketing=[reply_text("Done — posted."), reply_text("Done — posted.")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "s", srv) as d:
            out = await d.staff.submit(_task([POSTED]))
    assert srv.served == 1  # the follow-up would be a second model call: max_steps refuses it
    assert out.status == "circuit_breaker", out
    assert out.reason == (
        "max_steps 1 reached (1 model calls); before that, the answer was unverified: "
        "no successful call of post_update; the answer says 'posted'"
    )


async def test_a_follow_up_survives_a_crash_and_is_not_sent_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPANYD_DEBUG", "1")
    model = PerAgent(
        marketing=[
            reply_text("Done — posted."),
            stall(None, then=reply_tool_use("post_update", {"text": "We launch!"})),
            reply_text("Posted."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(_company(tmp_path), tmp_path / "s", srv) as d:
            running = asyncio.ensure_future(d.staff.submit(_task([POSTED])))
            async with asyncio.timeout(20):
                while len(srv.requests) < 2:  # the follow-up's model call is in flight
                    await asyncio.sleep(0.01)
            crashed = await d.debug("crash", "marketing")
            assert isinstance(crashed, DebugCrashed) and crashed.crashed is True
            srv.release_stalls()
            async with asyncio.timeout(30):
                out = await running
            shown = await d.journal.transcript(out.run_id)
    assert out.status == "ok", out
    assert srv.served == 3  # the resumed run paid for nothing twice
    sent = [m for m in srv.requests[2].body["messages"] if "does not hold" in str(m.get("content"))]
    assert len(sent) == 1  # the journaled follow-up was replayed, not asked again
    assert shown is not None
    verifications = [s for s in shown["steps"] if s["kind"] == "verification"]
    assert [(v["met"], bool(v["follow_up"])) for v in verifications] == [
        (False, True),
        (True, False),
    ]


async def test_an_approval_required_result_shows_unverified_before_the_founder_decides(
    tmp_path: Path,
) -> None:
    cfg = write_company(
        tmp_path,
        {"ceo": {}},
        routines={
            "notes": {
                "assignee": "ceo",
                "description": "Write down what the customer said.",
                "trigger": {"cron": "0 3 * * *"},
                "approval": "required",
                "deliver": [],
            }
        },
        dashboard={"enabled": False},
    )
    said = "I saved it in the company memory."
    model = PerAgent(ceo=[reply_text(said), reply_text(said)])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "s", srv, oneoff=False) as d:
            firing = asyncio.ensure_future(d.run_job("notes"))
            async with asyncio.timeout(30):
                while not (asked := d.bus.recent({"founder_result_for_approval"})):
                    await asyncio.sleep(0.02)
            [event] = asked
            rendered, _ = render(event.kind, event.data, event.source, {}, ["ceo"])
            [waiting] = (await d.inbox()).items  # companyd inbox, /inbox, the dashboard
            async with asyncio.timeout(30):
                started = await firing  # run_job answers once the result waits
            assert (started.state, started.status) == ("awaiting_approval", "unverified")
            assert started.approval_item == event.data["item_id"]
            await d.approve(str(event.data["item_id"]), by="Op")
            async with asyncio.timeout(30):
                while (fired := (await d.job_history("notes")).fires[0])["outcome"] is None:
                    await asyncio.sleep(0.02)
    assert event.data["unverified"] == MEMORY_WHY
    assert rendered.lines[0] == f"⚠ unverified: {MEMORY_WHY}"
    assert waiting.summary == (
        f"result of notes by ceo awaits approval: ⚠ unverified: {MEMORY_WHY} — {said}"
    )
    assert fired["outcome"] == "unverified"  # approved, and still said to be unverified
    assert fired["reason"] == f"approved by the founder; unverified: {MEMORY_WHY}"


async def test_a_consulted_colleagues_unverified_answer_reaches_the_asker_with_why(
    tmp_path: Path,
) -> None:
    cfg = write_company(tmp_path, {"ceo": {"consult": ["cfo"]}, "cfo": {"reports_to": "ceo"}})
    said = "I saved the numbers in the company memory."
    model = PerAgent(
        ceo=[reply_tool_use("consult", {"agent": "cfo", "question": "Q1?"}), reply_text("Thanks.")],
        cfo=[reply_text(said), reply_text(said)],
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "s", srv) as d:
            out = await d.ask("ceo", "Ask the CFO about Q1.")
    assert out.status == "ok", out
    ceo = [r for r in srv.requests if agent_of(r) == "ceo"]
    [result] = tool_results(ceo[-1])
    assert result["content"] == f"{said}\n\n(⚠ unverified: {MEMORY_WHY})"
    assert not result.get("is_error")
