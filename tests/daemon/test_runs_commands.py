"""``companyd runs``, ``runs show`` and ``runs last`` as the founder types them (issue 17):
the daemon (``companyd run``'s composition root, in this process:
:class:`~companyd.testing.inprocess.InProcessDaemon`) whose agents call the loopback
Messages API through the real anthropic SDK; the same commands (the CLI's entry point)
answered by the daemon over its control socket and, once it has stopped, read from the
files.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.cli import main
from companyd.daemon._protocol import RequestFailed
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import CliResult
from companyd.testing.inprocess import InProcessDaemon, cli_in_thread
from companyd.testing.messages_api import (
    MessagesAPIServer,
    RecordedRequest,
    Reply,
    reply_text,
    reply_tool_use,
)

pytestmark = pytest.mark.anyio

POST = (
    "Five ways clinics lose patients before the first visit\n\n"
    "1. The phone rings out. 2. The form asks for too much. …"
)
COMPANY = {
    "schema": "companyd/v1",
    # a zone other than UTC, without summer time: the founder reads every time in it (IST)
    "company": {"name": "Desk Co", "timezone": "Asia/Kolkata", "budget": {"daily_usd": 10}},
    "defaults": {"model": {"primary": "claude-sonnet-5-5"}},
    "agents": {
        "writer": {
            "title": "Writer",
            "instructions": "You are the writer.",
            "consult": ["editor"],
        },
        "editor": {
            "title": "Editor",
            "instructions": "You are the editor.",
            "reports_to": "writer",
        },
    },
    "routines": {
        "daily-post": {
            "assignee": "writer",
            "description": "Draft today's post.",
            "expected_output": "One post, ready to publish.",
            "reviewer": "editor",
            "trigger": {"cron": "0 14 * * *"},
        }
    },
}


class PerAgent:
    """One script of replies per agent (told apart by the system prompt's "You are the …")."""

    def __init__(self, **scripts: list[Reply]) -> None:
        self.scripts = scripts

    def __call__(self, request: RecordedRequest) -> Reply:
        system = json.dumps(request.body.get("system") if isinstance(request.body, dict) else "")
        for agent, script in self.scripts.items():
            if f"You are the {agent}." in system and script:
                return script.pop(0)
        return reply_text("Nothing more to do.")


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


async def offline_cli(cfg: Path, state: Path, *argv: str) -> CliResult:
    """``companyd ARGV`` with no daemon running: read from the state directory's files (the
    CLI's entry point, in a thread of this process: it runs its own event loop).
    """
    return await asyncio.to_thread(
        cli_in_thread, [*argv, "--config", str(cfg), "--state-dir", str(state)]
    )


async def test_the_founder_reads_what_a_routine_did(work: Path) -> None:
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(COMPANY, sort_keys=False), encoding="utf-8")
    state = work / "s"
    long_notes = "n" * 5_000
    model = PerAgent(
        writer=[
            reply_tool_use(
                "consult",
                {"agent": "editor", "question": f"Which angle today? Notes: {long_notes}"},
                id="toolu_ask_editor",
            ),
            reply_text(POST),
        ],
        editor=[reply_text("Lead with the phone."), reply_text("APPROVE: ready.")],
    )
    with MessagesAPIServer(responder=model) as srv:
        env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": srv.base_url}
        async with InProcessDaemon(cfg, state, env=env, offline=False) as d:
            await d.call("run_job", routine="daily-post")
            await _wait_for_result(d)
            last = await d.cli("runs", "last", "daily-post")
            assert last.rc == 0, last.err
            lines = last.out.splitlines()
            assert lines[0].startswith("daily-post · ") and " · writer · ok · $" in lines[0]
            assert re.fullmatch(r"daily-post · [-\d]{10} \d\d:\d\d IST · .*", lines[0])
            assert POST in last.out
            run_id = lines[0].rsplit(" · ", 1)[1]
            assert lines[-1] == f"the whole run: companyd runs show {run_id}"

            listed = await d.cli("runs")
            assert listed.rc == 0, listed.err
            row = next(line for line in listed.out.splitlines() if run_id in line)
            # the short answer column: the answer's first line, cut to fit
            assert row.endswith("Five ways clinics lose patients before the first visit 1. T…")
            assert row.split()[2:5] == ["IST", "writer", "daily-post"]  # its routine (issue 28)

            # the delivery is recorded by the alert service after the run has finished: a
            # CLI that answers quickly (issue 31) may ask before it is
            async with asyncio.timeout(30):
                while not (await d.call("run_show", run_id=run_id)).get("deliveries"):
                    await asyncio.sleep(0.05)
            shown = await d.cli("runs", "show", run_id)
            assert shown.rc == 0, shown.err
            text = shown.out
            assert f"run {run_id} · writer · ok" in text
            assert re.search(r"^started:  [-\d]{10} [\d:]{8} IST · took ", text, re.M), text
            assert "asked by: routine daily-post" in text
            assert "  Draft today's post." in text
            assert "  expected output: One post, ready to publish." in text
            assert "tool_use" in text and "end_turn" in text
            assert '. tool consult {"agent": "editor", "question": "Which angle today?' in text
            # the input cut to a few hundred characters, saying its full size
            question = {"agent": "editor", "question": f"Which angle today? Notes: {long_notes}"}
            size = len(json.dumps(question, ensure_ascii=False))
            assert f"nnn … [cut: {size:,} chars in all]" in text
            assert "      → Lead with the phone." in text
            assert "      consult: editor's run run-" in text
            assert ". review by editor: approved (run run-" in text
            assert "answer:\n  Five ways clinics lose patients" in text
            assert "totals:   2 model call(s) · 1 tool call(s) · in " in text
            # no Telegram here: the result (deliver: telegram, the default with an
            # expected_output) is not lost silently — the record says so, and the inbox
            # keeps it (issue 28)
            kept = re.search(
                r"^delivered:\n  not delivered to telegram: Telegram is not configured — kept "
                r"in the inbox \((k-[0-9a-f]+)\)$",
                text,
                re.M,
            )
            assert kept, text
            waiting = (await d.cli("inbox")).out
            assert re.search(
                rf"^{kept.group(1)}  kept +[-\d]{{10}} [\d:]{{5}} IST  ", waiting, re.M
            )
            inbox = json.loads((await d.cli("inbox", "--json")).out)["items"]
            item = next(i for i in inbox if i["id"] == kept.group(1))
            assert item["kind"] == "kept" and item["run_id"] == run_id
            assert item["actions"] == ["approve"] and POST.split("\n")[0] in item["summary"]
            read = await d.cli("approve", kept.group(1))
            assert read.rc == 0 and "marked read" in read.out, (read.out, read.err)
            inbox = json.loads((await d.cli("inbox", "--json")).out)["items"]
            assert kept.group(1) not in [i["id"] for i in inbox]

            via_daemon = json.loads((await d.cli("runs", "show", run_id, "--json")).out)
            # the filters, through the control socket (the CLI sends them as they are here)
            hour_ago = time.time() - 3_600
            queries: dict[str, dict[str, Any]] = {
                "routine": {"routine": "daily-post"},
                "agent": {"agent": "editor"},
                "ok since": {"status": "ok", "since": hour_ago},
                "since, limit": {"since": 946_684_800.0, "limit": 1},
            }
            filtered = {name: (await d.call("runs", **q))["runs"] for name, q in queries.items()}
            with pytest.raises(RequestFailed, match="no run 'run-nope' in the journal"):
                await d.call("run_show", run_id="run-nope")

    # the transcript, as JSON
    consult = next(s for s in via_daemon["steps"] if s["kind"] == "tool")
    assert consult["input"]["question"].startswith("Which angle today?")
    assert consult["result"] == "Lead with the phone."
    editor_run = consult["colleague_run"]["run_id"]
    assert via_daemon["review"]["approved"] is True
    assert via_daemon["asked_by"]["kind"] == "routine"
    assert via_daemon["totals"]["tool_calls"] == 1
    (undelivered,) = via_daemon["deliveries"]
    assert undelivered["to"] == "telegram" and undelivered["outcome"] == "not_delivered"
    assert undelivered["kept"] == kept.group(1)
    assert "Telegram is not configured" in undelivered["reason"]
    # the filters
    assert [r["run_id"] for r in filtered["routine"]] == [run_id]
    editor_runs = {r["run_id"] for r in filtered["agent"]}
    assert editor_run in editor_runs and via_daemon["review"]["run_id"] in editor_runs
    assert len(filtered["ok since"]) == 3
    assert len(filtered["since, limit"]) == 1

    # no daemon now: the same answers from the files
    offline = await offline_cli(cfg, state, "runs", "show", run_id, "--json")
    assert offline.rc == 0, offline.err
    assert json.loads(offline.out) == via_daemon
    assert (await offline_cli(cfg, state, "runs", "show", run_id)).out == text
    last_offline = await offline_cli(cfg, state, "runs", "last", "daily-post")
    assert last_offline.rc == 0 and POST in last_offline.out
    assert last_offline.out.splitlines()[0] == lines[0]  # the same zone from the files
    since = await offline_cli(
        cfg, state, "runs", "--routine", "daily-post", "--since", "1h", "--json"
    )
    assert [r["run_id"] for r in json.loads(since.out)["runs"]] == [run_id]


async def _wait_for_result(d: InProcessDaemon) -> None:
    """Until the routine's run has finished (30 s at most)."""
    async with asyncio.timeout(30):
        query = {"routine": "daily-post", "finished": True, "limit": 1}
        while not (await d.call("runs", **query))["runs"]:
            await asyncio.sleep(0.1)


def in_process(cfg: Path, state: Path, *argv: str) -> tuple[int, str, str]:
    """``companyd ARGV`` run by this process's CLI: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([*argv, "--config", str(cfg), "--state-dir", str(state)])
        except SystemExit as exc:  # argparse's usage errors
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def test_runs_refuses_what_it_cannot_answer(work: Path) -> None:
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(COMPANY, sort_keys=False), encoding="utf-8")
    state = work / "s"
    cases = {
        ("runs", "last", "weekly-post"): (1, "unknown routine 'weekly-post'", "daily-post"),
        ("runs", "--routine", "weekly-post"): (1, "unknown routine 'weekly-post'", "daily-post"),
        ("runs", "--since", "yesterday"): (2, "'yesterday'", "24h"),
        ("runs", "--status", "done"): (2, "'done'", "failed"),
        ("runs", "--limit", "0"): (2, "'0'", "at least 1"),
        ("runs", "open", "run-1"): (2, "'open run-1'", "show RUN_ID"),
        ("runs", "show", "run-nope"): (1, "no run 'run-nope'", "retention.runs_days"),
    }
    for argv, (rc, quoted, hint) in cases.items():
        got, _, err = in_process(cfg, state, *argv)
        assert got == rc, (argv, err)
        assert quoted in err and hint in err, (argv, err)
        assert "Traceback" not in err
    assert in_process(cfg, state, "runs", "last", "daily-post")[:2] == (
        0,
        "routine daily-post has no finished run yet\n",
    )
    assert not state.exists()  # reading never creates the state directory
