"""The transcript of real runs (issue 17): the real daemon in-process, its agents calling
the loopback Messages API through the real anthropic SDK, the transcript read back from
the journal — steps with model, tokens and cost, tool calls with their input and result,
colleagues' runs linked both ways, the reviewer's verdict, totals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from companyd.llm.model import Usage
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use

from .agentkit import PerAgent, running_company, write_company

pytestmark = pytest.mark.anyio


async def test_a_consultation_links_both_runs_with_each_step(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {"consult": ["cfo"]}, "cfo": {"reports_to": "ceo"}})
    model = PerAgent(
        ceo=[
            reply_tool_use(
                "consult",
                {"agent": "cfo", "question": "What is our runway?"},
                id="toolu_consult1",
                text="Let me ask the CFO.",
                usage=Usage(input_tokens=1200, output_tokens=40, cache_read_tokens=900),
            ),
            reply_text(
                "Runway: about 14 months.", usage=Usage(input_tokens=1300, output_tokens=12)
            ),
        ],
        cfo=[reply_text("About 14 months.")],
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Check the runway with the CFO.")
            ceo = await d.journal.transcript(out.run_id)
            assert ceo is not None
            call = next(s for s in ceo["steps"] if s["kind"] == "tool")
            cfo = await d.journal.transcript(call["colleague_run"]["run_id"])
    assert out.status == "ok", out
    assert ceo["asked_by"] == {
        "kind": "founder",
        "who": "the founder",
        "run_id": None,
        "source": "operator",
    }
    assert ceo["task"]["prompt"] == "Check the runway with the CFO."
    first, tool, last = ceo["steps"]
    assert first["kind"] == "model" and first["stop_reason"] == "tool_use"
    assert first["text"] == "Let me ask the CFO."
    assert (first["input_tokens"], first["output_tokens"], first["cache_read_tokens"]) == (
        1200,
        40,
        900,
    )
    assert first["cost_usd"] > 0 and first["model"] == "claude-sonnet-5-5"
    assert first["tool_calls"] == ["toolu_consult1"]
    assert tool["name"] == "consult" and tool["tool_use_id"] == "toolu_consult1"
    assert tool["input"] == {"agent": "cfo", "question": "What is our runway?"}
    assert tool["result"] == "About 14 months." and tool["is_error"] is False
    assert tool["colleague_run"]["agent"] == "cfo" and tool["colleague_run"]["kind"] == "consult"
    assert last["stop_reason"] == "end_turn" and last["text"] == "Runway: about 14 months."
    assert ceo["answer"] == "Runway: about 14 months."
    assert ceo["consultations"] == [tool["colleague_run"]]
    totals = ceo["totals"]
    assert totals["input_tokens"] == 2500 and totals["output_tokens"] == 52
    assert totals["tool_calls"] == 1 and totals["steps"] == 2
    assert totals["cost_usd"] == pytest.approx(out.cost_usd)
    assert totals["cost_usd"] == pytest.approx(first["cost_usd"] + last["cost_usd"])
    # the colleague's run points back at the run that asked
    assert cfo is not None
    assert cfo["asked_by"]["kind"] == "colleague"
    assert cfo["asked_by"]["who"] == "ceo" and cfo["asked_by"]["run_id"] == out.run_id
    assert cfo["answer"] == "About 14 months."


async def test_a_delegation_shows_the_reviewers_verdict_on_each_attempt(tmp_path: Path) -> None:
    cfg = write_company(
        tmp_path, {"ceo": {}, "cfo": {"reports_to": "ceo"}, "coo": {"reports_to": "ceo"}}
    )
    model = PerAgent(
        ceo=[
            reply_tool_use(
                "delegate",
                {
                    "agent": "cfo",
                    "task": "Forecast Q1 revenue.",
                    "expected_output": "A number with its assumptions.",
                    "reviewer": "coo",
                },
            ),
            reply_text("Forecast received."),
        ],
        cfo=[reply_text("Revenue will go up."), reply_text("$42k: 35 clinics at $1.2k.")],
        coo=[reply_text("REJECT: no number and no assumptions."), reply_text("APPROVE")],
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Get a Q1 forecast from the CFO.")
            ceo = await d.journal.transcript(out.run_id)
            assert ceo is not None
            (delegated,) = ceo["consultations"]
            second = await d.journal.transcript(delegated["run_id"])
            assert second is not None
            (earlier,) = second["other_attempts"]
            first = await d.journal.transcript(earlier["run_id"])
            assert first is not None and first["review"] is not None
            reviewer = await d.journal.transcript(first["review"]["run_id"])
    assert out.status == "ok", out
    assert delegated["kind"] == "delegate" and delegated["agent"] == "cfo"
    review: dict[str, Any] = first["review"]
    assert first["status"] == "failed" and review["approved"] is False
    assert review["reviewer"] == "coo" and review["verdict"] == "no number and no assumptions."
    assert review["run_id"] is not None
    assert second["attempt"] == 2 and second["status"] == "ok"
    assert second["review"]["approved"] is True and second["review"]["run_id"] is not None
    assert second["review"]["run_id"] != review["run_id"]
    assert second["task"]["expected_output"] == "A number with its assumptions."
    assert second["answer"] == "$42k: 35 clinics at $1.2k."
    # the reviewer's run was asked by the run it reviewed
    assert reviewer is not None and reviewer["agent"] == "coo"
    assert reviewer["asked_by"]["run_id"] == first["run_id"]
    assert reviewer["answer"].startswith("REJECT")
