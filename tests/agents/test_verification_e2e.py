r"""Verified work end to end (issue 27 acceptance): ``companyd run``'s composition root in
this process (:class:`~companyd.testing.inprocess.InProcessDaemon`: nothing here is about a
process), the real anthropic SDK against the Messages API stand-in, python-telegram-bot
against the Bot API stand-in, a real MCP tool server (``post_update``) over stdio, and the
commands by the CLI's entry point.

A routine with ``done_when: [{tool: post_update, result_matches: "posted id=\\d+"}]``:

* the model answers "Done — posted." without calling the tool: one follow-up in the same
  run, the same answer again, and the run ends ``unverified``; its Telegram delivery says
  "⚠ unverified: …" — and a second such fire in a row raises the warning alert;
* the founder's reply to it gets an answer claiming a memory write with none: it comes back
  in the thread under "⚠ unverified: …" (the claim check, no configuration);
* the model calls the tool: ``ok``;
* the model does the work only after the follow-up: ``ok``, and ``runs show`` has both
  attempts;
* ``jobs history`` counts the unverified runs apart from ok and failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentkit import PerAgent, tool_files, tool_server, write_company
from companyd.testing.bot_api import BotApiServer, SentMessage
from companyd.testing.daemon import short_dir
from companyd.testing.inprocess import InProcessDaemon
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use


def _tool_log(directory: Path) -> Path:
    """Where the sandboxed test tool server logs its calls (a directory it may write)."""
    return directory / "tool-files" / "tool.log"


TOKEN = "123456789:AAH-verify-test-secret-0123456789abcdef"
FOUNDER = 111
START_TIMEOUT = 90.0
CLAIM = "Done — posted."
WHY = "no successful call of post_update; the answer says 'posted'"
SAVED = "Yes: I saved it in the company memory."
SAVED_WHY = "the answer says it saved to the company memory, but the run wrote nothing to it"


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def _company(work: Path, bot: BotApiServer) -> Path:
    cfg = write_company(
        work,
        {
            "marketing": {
                "mcp_servers": {
                    "social": tool_server(
                        tool_files(work), TOOL_LOG=str(_tool_log(work)), TOOL_POST_ID="7"
                    )
                }
            }
        },
        alerts={
            "min_severity": "warning",
            "telegram": {
                "api_url": bot.url,
                "bot_token_env": "TELEGRAM_BOT_TOKEN",
                "chat_ids_env": "TELEGRAM_CHAT_ID",
            },
        },
    )
    doc = yaml.safe_load(cfg.read_text())
    doc["routines"] = {
        "daily-post": {
            "assignee": "marketing",
            "description": "Post today's update with post_update.",
            "expected_output": "The update, posted.",
            "trigger": {"cron": "0 3 29 2 *", "timezone": "UTC"},
            "deliver": ["telegram"],
            "done_when": [{"tool": "post_update", "result_matches": "posted id=\\d+"}],
        }
    }
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return cfg


async def _linked(state: Path, message_id: int) -> None:
    """Wait until the pager has recorded which run message ``message_id`` shows (a reply
    can only follow a message the daemon knows it sent).
    """
    db = state / "alerts.sqlite"
    async with asyncio.timeout(30):
        while True:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
                row = c.execute(
                    "SELECT run_id FROM threads WHERE chat_id = ? AND message_id = ?",
                    (FOUNDER, message_id),
                ).fetchone()
            if row is not None:
                return
            await asyncio.sleep(0.05)


def _to_founder(bot: BotApiServer, needle: str) -> list[SentMessage]:
    return [m for m in bot.messages if str(m.chat_id) == str(FOUNDER) and needle in m.text]


@pytest.mark.anyio
async def test_done_when_unverified_ok_and_ok_after_the_follow_up(work: Path) -> None:
    model = PerAgent(
        marketing=[
            # fire 1: claims, never calls the tool (the follow-up changes nothing)
            reply_text(CLAIM),
            reply_text(CLAIM),
            # the founder's Telegram reply to it: a memory claim with no memory write
            reply_text(SAVED),
            reply_text(SAVED),
            # fire 2: the same as fire 1
            reply_text(CLAIM),
            reply_text(CLAIM),
            # fire 3: does the work
            reply_tool_use("post_update", {"text": "We launch today!"}),
            reply_text("Posted the launch update."),
            # fire 4: claims first, does the work after the follow-up
            reply_text(CLAIM),
            reply_tool_use("post_update", {"text": "Second post"}),
            reply_text("Posted it now: id 7."),
        ]
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _company(work, bot)
            env = {
                "ANTHROPIC_API_KEY": "test-key",
                "ANTHROPIC_BASE_URL": srv.base_url,
                "TELEGRAM_BOT_TOKEN": TOKEN,
                "TELEGRAM_CHAT_ID": str(FOUNDER),
            }
            daemon = InProcessDaemon(cfg, work / "s", offline=False, env=env)
            try:
                await daemon.start(timeout=START_TIMEOUT)

                first = await daemon.call("run_job", routine="daily-post")
                assert first["status"] == "unverified", first
                assert first["reason"] == WHY
                assert srv.served == 2  # the answer, and the one follow-up in the same run
                follow = srv.requests[1].body["messages"][-1]["content"]
                assert (
                    "your answer says it was posted, but no call of post_update succeeded" in follow
                )
                await bot.wait_for(lambda: bool(_to_founder(bot, CLAIM)), timeout=30)
                [delivered] = _to_founder(bot, CLAIM)
                lines = delivered.text.splitlines()
                assert lines[0] == "📝 daily-post — marketing"
                assert lines[1] == f"⚠ unverified: {WHY}"

                # the founder replies to it: the follow-up's unverified answer comes back in
                # the thread, with its warning (no configuration: the claim check)
                await _linked(work / "s", delivered.message_id)
                _, asked = bot.inject_reply(
                    FOUNDER, delivered.message_id, "Did you keep a note of it?"
                )
                await bot.wait_for(lambda: bool(_to_founder(bot, SAVED)), timeout=30)
                [answer] = _to_founder(bot, SAVED)
                assert answer.reply_to == asked  # in the thread
                assert answer.text.splitlines()[1] == f"⚠ unverified: {SAVED_WHY}"

                second = await daemon.call("run_job", routine="daily-post")
                assert second["status"] == "unverified", second
                await bot.wait_for(
                    lambda: bool(_to_founder(bot, "unverified twice in a row")), timeout=30
                )
                [alert] = _to_founder(bot, "unverified twice in a row")
                assert "daily-post" in alert.text and WHY in alert.text

                third = await daemon.call("run_job", routine="daily-post")
                assert third["status"] == "ok", third
                ok_text = "Posted the launch update."
                await bot.wait_for(lambda: bool(_to_founder(bot, ok_text)), timeout=30)
                assert "unverified" not in _to_founder(bot, ok_text)[0].text

                fourth = await daemon.call("run_job", routine="daily-post")
                assert fourth["status"] == "ok", fourth
                shown = await daemon.cli("runs", "show", fourth["run_id"], "--json")
                text = await daemon.cli("runs", "show", fourth["run_id"])
                history = await daemon.cli("jobs", "history", "daily-post")
                listed = await daemon.cli("runs")
                jobs = await daemon.cli("jobs", "--json")
            finally:
                try:
                    await daemon.stop()
                finally:
                    daemon.close()
    assert srv.served == 11
    assert _tool_log(work).read_text().splitlines() == [
        "started We launch today!",
        "done We launch today!",
        "started Second post",
        "done Second post",
    ]
    # runs show: both attempts of the fourth run, and its verification block
    assert shown.rc == 0 and text.rc == 0, (shown.err, text.err)
    t = json.loads(shown.out)
    kinds = [s["kind"] for s in t["steps"]]
    assert kinds == ["model", "verification", "model", "tool", "model", "verification"]
    assert t["steps"][0]["text"] == CLAIM
    assert t["steps"][1]["met"] is False and t["steps"][1]["follow_up"]
    [check] = t["verification"]["checks"]
    assert check["met"] is True and check["step"] == 4
    out = text.out.splitlines()
    assert "verification: verified" in out
    assert any(
        ln.startswith("  ✓ a successful call of post_update whose result matches")
        and ln.endswith("(step 4)")
        for ln in out
    ), out
    # jobs history and the run list: unverified apart from ok and failed
    assert history.rc == 0, history.err
    assert "shown: 4 due run(s): 2 ok · 2 unverified" in history.out
    assert sum(" unverified " in ln for ln in listed.out.splitlines()) == 3  # and the reply
    [row] = json.loads(jobs.out)["routines"]
    assert row["success_7d"]["unverified"] == 0  # manual runs are not due runs
