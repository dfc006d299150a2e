"""The transcript of real runs (issue 17): the real daemon in-process, its agents calling
the loopback Messages API through the real anthropic SDK, the transcript read back from
the journal — steps with model, tokens and cost, tool calls with their input and result,
colleagues' runs linked both ways, the reviewer's verdict, totals.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentkit import PerAgent, delegation_reviewed_once, running_company, write_company
from companyd.cli._runs_text import transcript_lines
from companyd.llm._model import Usage
from companyd.runs import read_transcript
from companyd.runs._schema import MIGRATIONS
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use

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
    cfg, model = delegation_reviewed_once(tmp_path)
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


def test_a_call_that_waited_for_the_founder_shows_who_decided_when_and_why() -> None:
    """A ``require_approval`` call refused by the founder journals no ``tool_start``: the
    transcript still names the tool and its input, and says whose decision it was and when
    (the ``approval`` step the agent journals once the founder decides).
    """
    db = sqlite3.connect(":memory:")
    for migration in MIGRATIONS:
        assert isinstance(migration, str)
        db.executescript(migration)
    task = {"source": "operator", "prompt": "Announce the sale."}
    db.execute(
        "INSERT INTO tasks (id, agent, payload, state, created, updated) VALUES (?,?,?,?,?,?)",
        ("t-1", "marketing", json.dumps(task), "done", 1000.0, 1100.0),
    )
    db.execute(
        "INSERT INTO runs (id, task_id, agent, state, answer, started, ended, steps) "
        "VALUES (?,?,?,?,?,?,?,?)",
        ("run-1", "t-1", "marketing", "ok", "I did not post.", 1000.0, 1100.0, 2),
    )
    use = {"type": "tool_use", "id": "toolu_1", "name": "post_update", "input": {"text": "Sale!"}}
    steps = [
        ("llm", None, {"model": "m", "content": [use], "stop_reason": "tool_use", "usage": {}}),
        (
            "approval",
            "toolu_1",
            {
                "name": "post_update",
                "input": {"text": "Sale!"},
                "item": "ap-0123456789",
                "state": "rejected",
                "asked": 1000.0,
                "decided": 1060.0,
                "decided_by": "founder",
                "text": "not before Monday",
            },
        ),
        (
            "tool_result",
            "toolu_1",
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "is_error": True,
                "content": "rejected by the founder: not before Monday",
            },
        ),
    ]
    for seq, (kind, key, payload) in enumerate(steps, 1):
        db.execute(
            "INSERT INTO steps (run_id, seq, kind, key, payload, ts) VALUES (?,?,?,?,?,?)",
            ("run-1", seq, kind, key, json.dumps(payload), 1000.0 + seq),
        )
    t = read_transcript(db, "run-1")
    assert t is not None
    [call] = [s for s in t["steps"] if s["kind"] == "tool"]
    assert (call["name"], call["input"]) == ("post_update", {"text": "Sale!"})
    assert call["result"] == "rejected by the founder: not before Monday"
    assert call["approval"] == {
        "item_id": "ap-0123456789",
        "decision": "rejected",
        "decided_by": "founder",
        "via": None,  # a step journaled before decisions kept it
        "asked": 1000.0,
        "decided": 1060.0,
        "reason": "not before Monday",
    }
    assert t["totals"]["tool_calls"] == 1
    lines = transcript_lines(t)
    at = lines.index('   2. tool post_update {"text": "Sale!"}')
    assert lines[at + 1 : at + 3] == [
        "      waited for the founder (ap-0123456789, asked 1970-01-01 00:16:40 UTC) · "
        "rejected by founder 1970-01-01 00:17:40 UTC: not before Monday",
        "      → error: rejected by the founder: not before Monday",
    ]
