"""The founder's desk end to end (issue 17 acceptance): the daemon — a real ``companyd run``
process where a kill -9 or SIGTERM is part of the story (the daemon signalled, forked from
:mod:`companyd.testing.forkserver`, which imported the daemon and the anthropic SDK once;
the one started again on what it left runs in this process), else ``companyd run``'s composition
root in this process (:class:`~companyd.testing.inprocess.InProcessDaemon`) —
the real anthropic SDK against the Messages API stand-in, python-telegram-bot against the
Bot API stand-in, and a real MCP tool server over stdio.

* a ``require_approval`` tool call waits for the founder, survives a kill -9 of the daemon
  while it waits, and runs exactly once after Approve is pressed on Telegram;
* a rejected call never runs; the model reads "rejected by the founder: <reason>";
* ``ask_founder`` posts the question, and a Telegram reply to it is the tool's result;
* ``companyd inbox`` lists what waits, with its actions;
* ``companyd runs show`` (text and --json) shows the call once, with its input, its result
  or the founder's rejection, and who decided when.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import json
import re
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentkit import PerAgent, daemon_env, tool_files, tool_results, tool_server, write_company
from companyd.agents._calls import STOP_CALL_GRACE
from companyd.daemon import RequestFailed
from companyd.daemon._control_client import ControlClient
from companyd.daemon._main import AGENT_SHUTDOWN
from companyd.errors import EX_TEMPFAIL
from companyd.llm import Usage
from companyd.testing.bot_api import BotApiServer, SentMessage
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import CliResult, DaemonProcess
from companyd.testing.inprocess import InProcessDaemon, cli_in_thread
from companyd.testing.messages_api import (
    MessagesAPIServer,
    Reply,
    fault,
    reply_text,
    reply_tool_use,
    stall,
)

TOKEN = "123456789:AAH-founder-test-secret-0123456789abcdef"
FOUNDER = 111
#: a daemon with an MCP server and the pager starts in seconds, but the suite shares its
#: cores; readiness is not what these tests measure
START_TIMEOUT = 90.0


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def _company(work: Path, bot: BotApiServer, tool_log: Path, **marketing: Any) -> Path:
    return write_company(
        work,
        {
            "marketing": {
                "mcp_servers": {"social": tool_server(tool_log.parent, TOOL_LOG=str(tool_log))},
                "tools": {"require_approval": ["post_update"]},
                **marketing,
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


@contextlib.asynccontextmanager
async def _daemon(cfg: Path, work: Path, srv: MessagesAPIServer) -> AsyncIterator[InProcessDaemon]:
    """The daemon in this process (``companyd run``'s composition root), for the tests that
    need no signal: the MCP tool server, the SDKs and the stand-ins are as real as in a
    ``companyd run`` process.
    """
    env = {
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": srv.base_url,
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_CHAT_ID": str(FOUNDER),
    }
    async with InProcessDaemon(cfg, work / "s", env=env, offline=False) as daemon:
        yield daemon


def _signalled(cfg: Path, work: Path, srv: MessagesAPIServer) -> DaemonProcess:
    """The first daemon: a real ``companyd run`` (forked) on ``work / "s"``, which the test
    signals (SIGTERM, kill -9) before :func:`_restarted` starts again on its state.
    """
    return DaemonProcess(
        cfg, work / "s", log=work / "d1.log", offline=False, env=_env(srv), forked=True
    )


def _fire(daemon: DaemonProcess, routine: str) -> asyncio.Task[None]:
    """``run_job`` of ``routine`` in the background; the daemon may go down under it (its
    answer, or the broken connection, is not the point).
    """

    async def fire() -> None:
        with contextlib.suppress(Exception):
            await ControlClient(daemon.socket, timeout=120).acall("run_job", routine=routine)

    return asyncio.create_task(fire())


async def _answer(daemon: DaemonProcess, op: str, **args: Any) -> dict[str, Any]:
    """The daemon's answer to ``op`` as a client reads it (a refusal too)."""
    try:
        return {"ok": True, "result": await ControlClient(daemon.socket).acall(op, **args)}
    except RequestFailed as exc:
        return {"ok": False, "code": exc.code, "error": str(exc)}


def _logged(daemon: DaemonProcess, prefix: str) -> list[str]:
    """The messages of ``daemon``'s log records that start with ``prefix``."""
    return [str(r["msg"]) for r in daemon.records() if str(r.get("msg", "")).startswith(prefix)]


def _restarted(cfg: Path, work: Path, srv: MessagesAPIServer) -> InProcessDaemon:
    """The daemon started again on the state a signalled ``companyd run`` left: in this
    process (what it resumes is read from the files, whoever starts it). Made when it is
    started: its manual clock begins at that moment, after the first daemon's times.
    """
    env = {
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": srv.base_url,
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_CHAT_ID": str(FOUNDER),
    }
    return InProcessDaemon(cfg, work / "s", env=env, offline=False)


async def _cli_of(daemon: DaemonProcess, *argv: str) -> CliResult:
    """``companyd ARGV`` against a ``companyd run`` process by the CLI's entry point in a
    thread of this process (the command's output is the point, not its process).
    """
    full = [*argv, "--config", str(daemon.config), "--state-dir", str(daemon.state_dir)]
    async with asyncio.timeout(60):
        return await asyncio.to_thread(cli_in_thread, full)


async def _stop_both(first: DaemonProcess, second: InProcessDaemon | None) -> None:
    try:
        if second is not None:
            try:
                await second.stop()
            finally:
                second.close()
    finally:
        if first.proc is not None and first.returncode is None:
            await first.stop()


def _approval_company(work: Path, bot: BotApiServer, **routine: Any) -> Path:
    """:func:`_company` with marketing's ``daily-post`` at 14:00 needing the founder's
    approval (``routine``: more of its keys, e.g. ``deliver``).
    """
    cfg = _company(work, bot, tool_files(work) / "tool.log")
    doc = yaml.safe_load(cfg.read_text())
    doc["routines"] = {
        "daily-post": {
            "assignee": "marketing",
            "description": "Draft today's post.",
            "trigger": {"cron": "0 14 * * *"},
            "approval": "required",
            **routine,
        }
    }
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    return cfg


def _without_tools(cfg: Path) -> Path:
    """``cfg`` with marketing's MCP tool server taken out, for the tests whose runs call no
    tool: the agent's every start (and restart after a crash) then spawns no server (~1 s).
    """
    doc = yaml.safe_load(cfg.read_text())
    del doc["agents"]["marketing"]["mcp_servers"], doc["agents"]["marketing"]["tools"]
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    return cfg


def _env(model: MessagesAPIServer) -> dict[str, str]:
    return daemon_env(model, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_CHAT_ID=str(FOUNDER))


def _ask(daemon: DaemonProcess | InProcessDaemon, agent: str, question: str) -> asyncio.Task[None]:
    async def ask() -> None:
        # the daemon may be killed under it; the run's fate is read from the journal
        with contextlib.suppress(Exception):
            await ControlClient(daemon.socket, timeout=120).acall(
                "ask", agent=agent, question=question, timeout=100.0
            )

    return asyncio.create_task(ask())


def _to_founder(bot: BotApiServer, needle: str) -> list[SentMessage]:
    return [m for m in bot.messages if str(m.chat_id) == str(FOUNDER) and needle in m.text]


async def _message(bot: BotApiServer, needle: str) -> SentMessage:
    await bot.wait_for(lambda: bool(_to_founder(bot, needle)), timeout=30)
    return _to_founder(bot, needle)[0]


def _fails_then_stalls() -> tuple[dict[str, str], Callable[[Any], Any]]:
    """A model whose calls fail (a 400: the routine fails, its alert offers "Run again")
    while ``mode["now"] == "fail"``, then stall until released and answer the post.
    """
    mode = {"now": "fail"}

    def model(request: Any) -> Any:
        if mode["now"] == "fail":
            return fault(400, "prompt is malformed (injected)")
        return stall(None, then=reply_text("Flash sale today: every plan 20% off."))

    return mode, model


def _button(msg: SentMessage, label: str) -> str:
    rows = (msg.reply_markup or {}).get("inline_keyboard") or []
    for row in rows:
        for b in row:
            if label in b.get("text", ""):
                return str(b["callback_data"])
    raise AssertionError(f"no {label!r} button on {msg.text!r}: {rows}")


async def _run_status(daemon: DaemonProcess | InProcessDaemon, status: str) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            runs = (await daemon.call("runs"))["runs"]
            done = [r for r in runs if r["status"] == status]
            if done:
                return dict(done[0])
            await asyncio.sleep(0.1)


async def _resumed(daemon: InProcessDaemon, timeout: float = 30) -> None:
    """Wait until a run of ``daemon`` has resumed from its journal (its ``run_started``)."""
    async with asyncio.timeout(timeout):
        while not daemon.events(
            "run_started", lambda e: e["data"].get("resumed_at_step") is not None
        ):
            await asyncio.sleep(0.02)


async def _fire_ended(
    daemon: DaemonProcess | InProcessDaemon, routine: str, *, ok: bool = True, timeout: float = 60
) -> None:
    """Wait until ``routine``'s latest fire has ended (``ok``: ended ``ok``)."""
    async with asyncio.timeout(timeout):
        while True:
            outcome = (await daemon.call("job_history", routine=routine))["fires"][0]["outcome"]
            if (outcome == "ok") if ok else (outcome is not None):
                return
            await asyncio.sleep(0.05)


async def _show(
    daemon: DaemonProcess | InProcessDaemon, run_id: str
) -> tuple[list[str], dict[str, Any]]:
    """``companyd runs show RUN_ID`` as text lines and as --json."""
    text = await daemon.cli("runs", "show", run_id)
    js = await daemon.cli("runs", "show", run_id, "--json")
    assert text.rc == js.rc == 0, (text.err, js.err)
    return text.out.splitlines(), json.loads(js.out)


def _tool_steps(transcript: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in transcript["steps"] if s["kind"] == "tool"]


def _started(tool_log: Path) -> list[str]:
    if not tool_log.exists():
        return []
    return [x for x in tool_log.read_text().splitlines() if x.startswith("started")]


@pytest.mark.anyio
async def test_an_approval_survives_kill_9_and_the_tool_runs_once_after_approve(
    work: Path,
) -> None:
    tool_log = tool_files(work) / "tool.log"
    model = PerAgent(
        marketing=[
            reply_tool_use(
                "post_update",
                {"text": "We launch today!"},
                text="The launch post is ready; posting it as the founder asked.",
            ),
            reply_text("Posted the launch update."),
        ]
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _company(work, bot, tool_log)
            first = _signalled(cfg, work, srv)
            second: InProcessDaemon | None = None
            try:
                await first.start(timeout=START_TIMEOUT)
                asking = _ask(first, "marketing", "Post the launch update.")
                approval = await _message(bot, "wants to call post_update")
                assert "We launch today!" in approval.text  # the arguments
                assert "The launch post is ready" in approval.text  # the agent's reason
                item_id = approval.text.split("approve? (")[1].split(")")[0]
                assert _started(tool_log) == []  # nothing runs before the founder says so
                inbox = await _cli_of(first, "inbox")
                assert inbox.rc == 0, inbox.err
                assert f"{item_id}  approval" in inbox.out
                assert f"companyd approve {item_id}" in inbox.out

                first.send_signal(signal.SIGKILL)
                await first.wait(10)
                await asking

                second = _restarted(cfg, work, srv)
                await second.start(timeout=START_TIMEOUT)
                # the run resumed from its journal (no second request is sent: counted once
                # the restarted daemon has stopped, its outbox delivered)
                await _resumed(second)
                assert (await second.call("runs"))["runs"][0]["status"] == "running"
                # the button on the message sent before the kill still works
                bot.press_button(FOUNDER, approval.message_id, _button(approval, "Approve"))
                run = await _run_status(second, "ok")
                assert run["answer"] == "Posted the launch update."
                lines, shown = await _show(second, run["run_id"])
            finally:
                await _stop_both(first, second)
    # the resumed run waited for the same approval: asked once, not again after the kill
    assert len(_to_founder(bot, "wants to call post_update")) == 1
    assert _started(tool_log) == ["started We launch today!"]  # exactly once
    assert tool_results(srv.requests[-1])[0]["content"] == "posted: We launch today!"
    assert srv.served == 2  # the first model call was not paid again after the kill
    await bot.wait_for(lambda: any("approved" in f for f in _footers(bot, approval)), timeout=10)
    # runs show: the call once, with its input and result, and the founder's approval
    [call] = _tool_steps(shown)
    assert call["name"] == "post_update"
    assert call["input"] == {"text": "We launch today!"}
    assert call["result"] == "posted: We launch today!"
    assert call["is_error"] is False
    decision = call["approval"]
    assert decision["item_id"] == item_id
    assert (decision["decision"], decision["decided_by"]) == ("approved", "Op (@operator)")
    assert decision["via"] == "telegram"
    assert decision["asked"] <= decision["decided"] <= call["finished"]
    assert shown["totals"]["tool_calls"] == 1
    assert shown["answer"] == "Posted the launch update."
    assert lines.count('   2. tool post_update {"text": "We launch today!"}') == 1
    assert lines.count("      → posted: We launch today!") == 1
    waited = [ln for ln in lines if "waited for the founder" in ln]
    assert len(waited) == 1 and f"({item_id}, asked " in waited[0]
    assert " · approved by Op (@operator) via telegram " in waited[0]


def _reply(bot: BotApiServer, to: SentMessage, text: str) -> int:
    """The founder replies to the bot's message ``to`` (as Telegram sends it); the reply's
    message id.
    """
    chat = {"id": FOUNDER, "type": "private", "first_name": "Op"}
    message_id = 9000 + len(bot.messages)
    bot.inject_update(
        {
            "message": {
                "message_id": message_id,
                "date": int(to.date) + 5,
                "chat": chat,
                "from": {"id": FOUNDER, "is_bot": False, "first_name": "Op"},
                "text": text,
                "reply_to_message": {
                    "message_id": to.message_id,
                    "date": int(to.date),
                    "chat": chat,
                    "from": {"id": 1, "is_bot": True, "first_name": "companyd"},
                    "text": to.text,
                },
            }
        }
    )
    return message_id


def _buttons_now(bot: BotApiServer, msg: SentMessage) -> list[tuple[str, str]]:
    now = bot.find_message(FOUNDER, msg.message_id)
    return now.buttons() if now is not None else []


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _footers(bot: BotApiServer, msg: SentMessage) -> list[str]:
    now = bot.find_message(FOUNDER, msg.message_id)
    return (now.text if now else "").splitlines()


def _assert_withdrawn(
    bot: BotApiServer, asked: SentMessage, item: str, inbox: CliResult, late: CliResult, why: str
) -> None:
    """Approval ``item`` (asked in ``asked``) was closed as withdrawn for ``why``: its message
    says so without buttons, ``inbox`` no longer lists it, a ``late`` approve is refused with
    the reason.
    """
    assert _footers(bot, asked)[-1].startswith(
        "✔ withdrawn: the run that asked no longer waits for it at "
    )
    assert item not in inbox.out
    assert late.rc != 0
    assert f"approval {item} was withdrawn (its run ended: withdrawn: {why})" in late.err + late.out


@pytest.mark.anyio
async def test_a_rejected_call_never_runs_and_the_agent_reads_the_reason(work: Path) -> None:
    tool_log = tool_files(work) / "tool.log"
    model = PerAgent(
        marketing=[
            reply_tool_use("post_update", {"text": "Flash sale!"}, text="Announcing the sale."),
            reply_text("The founder said no; I did not post."),
        ]
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _company(work, bot, tool_log)
            async with _daemon(cfg, work, srv) as daemon:
                asking = _ask(daemon, "marketing", "Announce the flash sale.")
                approval = await _message(bot, "wants to call post_update")
                item_id = approval.text.split("approve? (")[1].split(")")[0]
                bot.inject_command(FOUNDER, "/inbox")
                inbox = await _message(bot, "📥")
                head, waiting, commands = inbox.text.splitlines()[1:]
                assert head == (
                    f"• approval {item_id}: marketing wants to call post_update with "
                    '{"text": "Flash sale!"} — Announcing the sale.'
                )
                # its age and expiry (issue 27: approvals keep their contract)
                assert waiting.startswith("   waiting "), waiting
                # a 24 h approval_timeout, asked within the last minute
                expires = r" · expires in (23h 59m|1d 00h) \(then denied\)$"
                assert re.search(expires, waiting), waiting
                assert commands == f"   /approve {item_id} · /reject {item_id} [REASON]"
                done = await daemon.cli("reject", item_id, "not", "before", "Monday")
                assert done.rc == 0, done.err
                assert done.out.startswith(f"rejected {item_id} (post_update call of marketing)")
                run = await _run_status(daemon, "ok")
                await asking
                lines, shown = await _show(daemon, run["run_id"])
                again = await daemon.cli("approve", item_id)
                assert again.rc == 1
                assert (
                    f"approval {item_id} was already rejected by {getpass.getuser()}" in again.err
                )
    assert run["answer"] == "The founder said no; I did not post."
    assert _started(tool_log) == []
    result = tool_results(srv.requests[-1])[0]
    assert result["is_error"] is True
    assert result["content"] == "rejected by the founder: not before Monday"
    # runs show: the refused call with its input, the tool error and the founder's rejection
    [call] = _tool_steps(shown)
    assert (call["name"], call["input"]) == ("post_update", {"text": "Flash sale!"})
    assert call["is_error"] is True
    assert call["result"] == "rejected by the founder: not before Monday"
    assert call["approval"]["decision"] == "rejected"
    assert call["approval"]["reason"] == "not before Monday"
    assert lines.count('   2. tool post_update {"text": "Flash sale!"}') == 1
    assert "      → error: rejected by the founder: not before Monday" in lines
    waited = [ln for ln in lines if "waited for the founder" in ln]
    assert len(waited) == 1
    assert f" · rejected by {getpass.getuser()} via cli " in waited[0]
    assert waited[0].endswith(": not before Monday")


@pytest.mark.anyio
async def test_ask_founder_waits_for_a_telegram_reply_to_the_question(work: Path) -> None:
    model = PerAgent(
        marketing=[
            reply_tool_use("ask_founder", {"question": "Launch on Friday or Monday?"}),
            reply_text("Launching on Friday, as the founder said."),
        ]
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _company(work, bot, tool_files(work) / "tool.log", tools={"ask_founder": True})
            async with _daemon(cfg, work, srv) as daemon:
                asking = _ask(daemon, "marketing", "Plan the launch.")
                question = await _message(bot, "Launch on Friday or Monday?")
                assert "marketing asks you (q-" in question.text
                _reply(bot, question, "Friday, before noon")
                run = await _run_status(daemon, "ok")
                await asking
                lines, shown = await _show(daemon, run["run_id"])
                confirm = await _message(bot, "answered q-")
                assert "question of marketing" in confirm.text
    assert run["answer"] == "Launching on Friday, as the founder said."
    result = tool_results(srv.requests[-1])[0]
    assert result["content"] == "The founder answered: Friday, before noon"
    assert not result.get("is_error")
    # runs show: the question and the founder's answer, as the tool call and its result
    [call] = _tool_steps(shown)
    assert call["name"] == "ask_founder"
    assert call["input"] == {"question": "Launch on Friday or Monday?"}
    assert call["result"] == "The founder answered: Friday, before noon"
    assert "      → The founder answered: Friday, before noon" in lines


def _burst(questions: list[str]) -> Reply:
    """One model turn calling ``ask_founder`` once per question, all at once."""
    return Reply(
        content=tuple(
            {
                "type": "tool_use",
                "id": f"toolu_burst_{n:03d}",
                "name": "ask_founder",
                "input": {"question": q},
            }
            for n, q in enumerate(questions)
        ),
        stop_reason="tool_use",
        usage=Usage(input_tokens=10, output_tokens=20),
    )


def _asked(bot: BotApiServer) -> list[SentMessage]:
    """The questions sent to the founder (not the edits of them, nor the confirmations)."""
    return _to_founder(bot, "marketing asks you (q-")


def _asked_count(bot: BotApiServer, n: int) -> Callable[[], bool]:
    return lambda: len(_asked(bot)) == n


@pytest.mark.anyio
@pytest.mark.parametrize("n", [3, 30])
async def test_a_burst_of_questions_reaches_the_founder_one_message_at_a_time(
    work: Path, n: int
) -> None:
    """Issue 32 item 8: an agent asking ``n`` questions at once (3, or a runaway 30 of
    which ``max_open_questions`` = 3 are taken) sends the founder ONE message; a reply to
    it answers that question and brings the next, and every answer reaches the agent.
    """
    questions = [f"Question number {i:02d}: yes or no?" for i in range(n)]
    model = PerAgent(marketing=[_burst(questions), reply_text("Done with all the answers.")])
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _company(work, bot, tool_files(work) / "tool.log", tools={"ask_founder": True})
            async with _daemon(cfg, work, srv) as daemon:
                asking = _ask(daemon, "marketing", "Ask away.")
                await bot.wait_for(lambda: bool(_asked(bot)), timeout=30)
                # all three questions are on the desk...
                async with asyncio.timeout(30):
                    while True:
                        inbox = await daemon.cli("inbox")
                        if inbox.out.count("  question") >= 3:
                            break
                        await asyncio.sleep(0.1)
                assert inbox.out.count("  question") == 3, inbox.out
                await asyncio.sleep(1.0)  # ...and what the pager would send is sent by now
                assert len(_asked(bot)) == 1, [m.text for m in _asked(bot)]
                answers = []
                for turn in range(3):
                    shown = _asked(bot)
                    assert len(shown) == turn + 1, [m.text for m in shown]
                    [asked] = [q for q in questions if q in shown[-1].text]
                    answers.append(f"answer {turn} to {asked[:18]}")
                    _reply(bot, shown[-1], answers[-1])
                    if turn < 2:
                        # the answer brings the next question
                        await bot.wait_for(_asked_count(bot, turn + 2), timeout=30)
                run = await _run_status(daemon, "ok")
                await asking
                await asyncio.sleep(0.5)
                assert len(_asked(bot)) == 3  # nothing more was sent
    assert run["answer"] == "Done with all the answers."
    results = tool_results(srv.requests[-1])
    assert len(results) == n
    got = sorted(str(r["content"]) for r in results if not r.get("is_error"))
    assert got == sorted(f"The founder answered: {a}" for a in answers)
    refused = [r for r in results if r.get("is_error")]
    assert len(refused) == n - 3
    assert all("not asked: you already have 3 question(s)" in str(r["content"]) for r in refused)


@pytest.mark.anyio
async def test_a_routine_with_approval_is_done_only_once_approved_after_one_change_round(
    work: Path,
) -> None:
    model = PerAgent(
        marketing=[
            reply_text("Draft 1: We launch on Friday."),
            reply_text("Draft 2: We launch on Friday! 🚀"),
        ]
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _without_tools(
                _approval_company(work, bot, deliver=["telegram", "memory", "file"])
            )
            async with _daemon(cfg, work, srv) as daemon:
                client = ControlClient(daemon.socket, timeout=120)
                firing = asyncio.create_task(client.acall("run_job", routine="daily-post"))
                first = await _message(bot, "daily-post by marketing awaits your approval")
                assert "Draft 1: We launch on Friday." in first.text
                history = (await daemon.call("job_history", routine="daily-post"))["fires"]
                assert [f["outcome"] for f in history] != ["ok"]  # not done before approval
                # run_job answered once the result waited (issue 28): the fire goes on
                async with asyncio.timeout(30):
                    started = await firing
                assert started["state"] == "awaiting_approval"
                assert started["approval_item"].startswith("r-")

                change = _reply(bot, first, "Add a rocket emoji")
                second = await _message(bot, "round 2")
                assert "Draft 2: We launch on Friday! 🚀" in second.text
                assert second.reply_to == change  # in the thread of the change asked for
                # the first draft's buttons are gone: it was sent back
                await bot.wait_for(lambda: not _buttons_now(bot, first), timeout=10)
                follow_up = srv.requests[-1].body["messages"][0]["content"]
                assert "Your result was:\nDraft 1: We launch on Friday." in str(follow_up)
                assert "The founder asks for changes:\nAdd a rocket emoji" in str(follow_up)

                bot.press_button(FOUNDER, second.message_id, _button(second, "Approve"))
                # the fire ends with the approval
                await _fire_ended(daemon, "daily-post", ok=False, timeout=30)
                # one short confirmation in the thread, naming what was done
                confirm = await _message(bot, "approved —")
                assert confirm.text == "✅ daily-post approved — delivered to memory, file"
                assert confirm.reply_to == second.message_id
                history = (await daemon.call("job_history", routine="daily-post"))["fires"]
                assert history[0]["outcome"] == "ok"
                assert history[0]["reason"] == "approved by the founder after 1 change request(s)"
                # runs show: the changed draft's run follows the first draft's, in one thread
                runs = (await daemon.call("runs", agent="marketing"))["runs"]
                by_answer = {r["answer"]: r["run_id"] for r in runs}
                draft1 = by_answer["Draft 1: We launch on Friday."]
                draft2 = by_answer["Draft 2: We launch on Friday! 🚀"]
                lines, shown = await _show(daemon, draft2)
                assert shown["thread"]["reply_to"]["run_id"] == draft1
                assert (
                    "The founder asks for changes:\nAdd a rocket emoji" in shown["task"]["prompt"]
                )
                assert f"follows:  marketing's run {draft1} (ok)" in lines
                [approved] = shown["decisions"]
                assert (approved["decision"], approved["round"]) == ("approved", 2)
                assert (approved["by"], approved["via"]) == ("Op (@operator)", "telegram")
                said = [ln for ln in lines if ln.startswith("founder:")]
                assert said == [
                    f"founder:  approved by Op (@operator) via telegram at "
                    f"{_utc(approved['decided'])} UTC ({approved['item_id']}, round 2)"
                ]
                lines, shown = await _show(daemon, draft1)
                assert [r["run_id"] for r in shown["thread"]["replies"]] == [draft2]
                [changes] = shown["decisions"]
                assert changes["decision"] == "changes_requested"
                assert (changes["by"], changes["via"]) == ("Op", "telegram")
                assert changes["text"] == "Add a rocket emoji"
                assert (
                    f"founder:  changes requested by Op via telegram at {_utc(changes['decided'])}"
                    f" UTC ({changes['item_id']}, round 1): Add a rocket emoji" in lines
                )
                # for docs/desk.md and the README, when they change
                print(
                    "",
                    *_footers(bot, first),
                    "",
                    second.text,
                    "",
                    confirm.text,
                    *said,
                    *lines,
                    sep="\n",
                )
                await asyncio.sleep(1.0)  # room for a second confirmation, were there one
    assert srv.served == 2  # the change request looped once through the agent
    assert len(_to_founder(bot, "approved —")) == 1
    assert len(_to_founder(bot, "Draft 2: We launch on Friday! 🚀")) == 1  # not again


@pytest.mark.anyio
async def test_a_routine_result_waiting_for_approval_survives_kill_9(work: Path) -> None:
    model = PerAgent(marketing=[reply_text("Draft: We launch on Friday.")])
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _without_tools(_approval_company(work, bot))
            first = _signalled(cfg, work, srv)
            second: InProcessDaemon | None = None
            try:
                await first.start(timeout=START_TIMEOUT)

                firing = _fire(first, "daily-post")
                result = await _message(bot, "daily-post by marketing awaits your approval")
                item_id = result.text.split("awaits your approval (")[1].split(")")[0]
                # (the founder reads the inbox first: a kill within milliseconds of the send
                # could beat the outbox's note that it was sent, and the message would be
                # sent again after the restart — the outbox's at-least-once window, not this)
                history = (await first.call("job_history", routine="daily-post"))["fires"]
                assert history[0]["outcome"] is None  # not done before approval
                assert f"{item_id}  result" in (await _cli_of(first, "inbox")).out
                first.send_signal(signal.SIGKILL)
                await first.wait(10)
                await firing

                second = _restarted(cfg, work, srv)
                await second.start(timeout=START_TIMEOUT)
                inbox = await second.cli("inbox")
                assert f"{item_id}  result" in inbox.out, inbox.err
                history = (await second.call("job_history", routine="daily-post"))["fires"]
                assert history[0]["outcome"] is None  # still open: waiting for the founder
                done = await second.cli("approve", item_id)
                assert done.rc == 0, done.err
                async with asyncio.timeout(30):
                    while True:
                        fires = (await second.call("job_history", routine="daily-post"))["fires"]
                        if fires[0]["outcome"] is not None:
                            break
                        await asyncio.sleep(0.1)
                # decided on the command line: the message's buttons go away, and the
                # confirmation comes in its thread
                await bot.wait_for(lambda: not _buttons_now(bot, result), timeout=30)
                footer = _footers(bot, result)[-1]
                assert footer.startswith(f"✔ approved by {getpass.getuser()} via cli at ")
                confirm = await _message(bot, "approved —")
                assert confirm.text == "✅ daily-post approved — nothing more to deliver"
                assert confirm.reply_to == result.message_id
                lines, shown = await _show(second, fires[0]["run_id"])
            finally:
                await _stop_both(first, second)
    assert fires[0]["outcome"] == "ok"
    assert fires[0]["reason"].startswith("approved by the founder (the daemon restarted")
    sent = _to_founder(bot, "awaits your approval")
    assert len(sent) == 1  # asked once, not again after the restart
    assert srv.served == 1  # the draft was not made again
    [decision] = shown["decisions"]
    assert (decision["decision"], decision["by"], decision["via"]) == (
        "approved",
        getpass.getuser(),
        "cli",
    )
    assert any(
        ln.startswith(f"founder:  approved by {getpass.getuser()} via cli at ") for ln in lines
    )


# slow: a real daemon, a restart and a founder's round trip; 11 s alone, 24 s in the
# whole suite's run (four workers on two cores) when both daemons were processes: over the
# 20 s line (docs/testing.md). Re-measured in round 11 (restarted daemon in-process, no tool
# server): 3.8 s (sigterm) and 0.7 s (kill -9) alone, 8.6 s for sigterm in an idle whole
# run; the mark stays for the order it gives its module (started first), not its length.
@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_change_request_cut_by_a_restart_comes_back_once_in_its_thread(
    work: Path, sig: signal.Signals
) -> None:
    """A change request whose run the daemon's stop (SIGTERM) or death (kill -9) cuts comes
    back once, in its thread, from one run after the restart.

    What can go wrong is the *run*, not the message: round 2's message cannot be sent twice
    by construction — it announces the desk item ``<root>/result/2``, whose id is made from
    that key, inserted ``ON CONFLICT DO NOTHING`` and announced only when created
    (``Desk.request``), and the alerts are keyed by the item. The duplicate this guards is
    the change's follow-up task ``<root>.2`` run a second time after the restart — once by
    the journal's resume and once more by the fire's change round (``ResultApprovals``
    joins the resumed run through ``held``): the founder pays for the draft twice while
    the thread still shows one message. So the checks are the founder's: one message in the
    change's thread, one run of the change request (``companyd runs``) and one model call
    per draft. Checked (both parameters): ``held = None`` in ``ResultApprovals._rounds``
    fails the run count (two runs of ``<root>.2``, three drafts paid; the thread showed one
    message, which was all the test asked before); the follow-up under a fresh task id
    fails it too (round 2 carries the unscripted run's answer); the item announced on every
    ``Desk.request`` does not — the alert of ``founder_result_for_approval`` is keyed by
    the item id and coalesces (the construction asserted below).
    """
    model = PerAgent(
        marketing=[reply_text("Draft 1: We launch on Friday."), reply_text("Draft 2: Friday! 🚀")]
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _without_tools(_approval_company(work, bot))
            first = _signalled(cfg, work, srv)
            second: InProcessDaemon | None = None
            try:
                await first.start(timeout=START_TIMEOUT)

                firing = _fire(first, "daily-post")
                draft = await _message(bot, "daily-post by marketing awaits your approval")
                # the change's run is in its model call when the daemon goes down
                srv.enqueue(stall(None))
                change = _reply(bot, draft, "Add a rocket emoji")
                await asyncio.to_thread(srv.wait_for_requests, 2, 60.0)
                if sig is signal.SIGTERM:
                    assert await first.stop(timeout=60) == 0
                else:
                    first.send_signal(sig)
                    await first.wait(10)
                srv.release_stalls()
                await firing

                second = _restarted(cfg, work, srv)
                await second.start(timeout=START_TIMEOUT)
                again = await _message(bot, "round 2")
                assert "Draft 2: Friday! 🚀" in again.text
                assert again.reply_to == change  # in the thread of the change asked for
                bot.press_button(FOUNDER, again.message_id, _button(again, "Approve"))
                async with asyncio.timeout(30):
                    while True:
                        fires = (await second.call("job_history", routine="daily-post"))["fires"]
                        if fires[0]["outcome"] is not None:
                            break
                        await asyncio.sleep(0.1)
                await second.quiet()  # a duplicate, were there one, is sent by now
                runs = (await second.call("runs"))["runs"]
                root = fires[0]["task_id"]
                # the construction: round 2 is the one desk item of its key, and its message
                # names it
                round2 = await second.running.desk.latest(f"{root}/result/")
            finally:
                await _stop_both(first, second)
    assert fires[0]["outcome"] == "ok"
    assert round2 is not None and round2.key == f"{root}/result/2", round2
    assert round2.id in again.text, again.text
    assert len(_to_founder(bot, "round 2")) == 1  # once, not again after the restart
    assert [m.text for m in bot.messages if m.reply_to == change] == [again.text]
    # the change request ran once: the journal's resumed run, not a second one besides it
    assert sorted((r["task_id"], r["status"]) for r in runs) == [
        (root, "ok"),
        (f"{root}.2", "ok"),
    ], runs
    assert srv.served == 2  # Draft 1 and Draft 2, each paid once (the cut call: unserved)
    assert len(_to_founder(bot, "awaits your approval")) == 2


@pytest.mark.anyio
async def test_jobs_run_answers_at_once_when_its_run_waits_for_a_tool_approval(
    work: Path,
) -> None:
    """Issue 28: `companyd jobs run` of a routine whose run stops for a tool approval does
    not wait out its 60 s deadline (exit 75, "the daemon may be overloaded"): it says at
    once that the run waits for the founder, and where to decide; the fire goes on.

    Round 11: two fires of the routine at once (``concurrency: queue``) — each caller is
    told about its own fire's run and item, never the other's.
    """
    tool_log = tool_files(work) / "tool.log"
    model = PerAgent(marketing=_posts_the_sale() * 2)
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _company(work, bot, tool_log)
            doc = yaml.safe_load(cfg.read_text())
            doc["routines"] = {
                "daily-post": {
                    "assignee": "marketing",
                    "description": "Announce the flash sale.",
                    "trigger": {"cron": "0 3 29 2 *"},
                    "concurrency": "queue",
                }
            }
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            async with _daemon(cfg, work, srv) as daemon:
                cli = asyncio.ensure_future(
                    daemon.cli("jobs", "run", "daily-post", "--json", timeout=30)
                )
                other = asyncio.ensure_future(daemon.call("run_job", routine="daily-post"))
                await asyncio.wait((cli, other), return_when=asyncio.FIRST_COMPLETED)
                # the first fire's run waits for the founder; the second waits behind it
                assert not (cli.done() and other.done()), (cli.result(), other.result())
                answers = [cli, other] if cli.done() else [other, cli]

                async def answer(call: asyncio.Future[Any]) -> dict[str, Any]:
                    got = await call
                    return json.loads(got.out) if call is cli else got  # type: ignore[no-any-return]

                first = await answer(answers[0])
                assert (first["state"], first["status"]) == ("waiting_for_founder", "running")
                item = first["approval_item"]
                assert re.fullmatch(r"ap-[0-9a-f]+", item), item
                assert first["message"] == (
                    f"started routine daily-post: its run {first['run_id']} waits for your "
                    f"approval of a post_update call ({item}); approve or reject it in the "
                    f"dashboard's inbox, Telegram (/approve {item}) or `companyd approve "
                    f"{item}` (or `companyd inbox`). The run goes on after that; `companyd "
                    "runs last daily-post` shows its result"
                )
                assert _started(tool_log) == []  # not before the founder says yes
                # over the socket: the CLI still waiting holds the in-thread CLI's streams
                await daemon.call("approve", item_id=item)
                # the second caller hears of its own fire: its run, its item
                second = await answer(answers[1])
                assert second["state"] == "waiting_for_founder", second
                assert second["run_id"] != first["run_id"], (first, second)
                assert second["approval_item"] != item, (first, second)
                mine = await daemon.running.desk.get(second["approval_item"])
                assert mine is not None and mine.run_id == second["run_id"], (mine, second)
                done = await daemon.cli("approve", second["approval_item"])
                assert done.rc == 0, done.err
                await _fire_ended(daemon, "daily-post")
                assert len(_started(tool_log)) == 2
                await daemon.stop()


@pytest.mark.anyio
async def test_jobs_run_answers_at_once_when_a_colleague_its_run_asked_waits_for_approval(
    work: Path,
) -> None:
    """`companyd jobs run` of a routine whose run consults a colleague whose own run stops
    for a tool approval: the founder's item is the colleague's (its run has no routine), yet
    the command answers at once — the routine's run, the colleague, the item and where to
    decide — instead of waiting out its 60 s deadline; the fire goes on after Approve.
    """
    tool_log = tool_files(work) / "tool.log"
    model = _ceo_consults_on_the_sale("Marketing posted the flash sale.")
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_log)
            async with _daemon(cfg, work, srv) as daemon:
                got = await daemon.cli("jobs", "run", "daily-post", "--json", timeout=30)
                assert got.rc == 0, got.err
                data = json.loads(got.out)
                assert (data["state"], data["status"]) == ("waiting_for_founder", "running")
                assert (data["routine"], data["agent"]) == ("daily-post", "ceo")
                item = data["approval_item"]
                assert re.fullmatch(r"ap-[0-9a-f]+", item), item
                runs = {r["run_id"]: r for r in (await daemon.call("runs"))["runs"]}
                ceo_run = data["run_id"]
                assert runs[ceo_run]["agent"] == "ceo"
                asked = [r for r in runs.values() if r["asked_by"] == ceo_run]
                assert [r["agent"] for r in asked] == ["marketing"]
                assert data["message"] == (
                    f"started routine daily-post: its run {ceo_run} asked marketing, whose "
                    f"run {asked[0]['run_id']} waits for your approval of a post_update call "
                    f"({item}); approve or reject it in the dashboard's inbox, Telegram "
                    f"(/approve {item}) or `companyd approve {item}` (or `companyd inbox`). "
                    "The run goes on after that; `companyd runs last daily-post` shows its "
                    "result"
                )
                assert _started(tool_log) == []  # not before the founder says yes
                done = await daemon.cli("approve", item)
                assert done.rc == 0, done.err
                await _fire_ended(daemon, "daily-post")
                assert len(_started(tool_log)) == 1
                await daemon.stop()


@pytest.mark.anyio
async def test_run_again_on_the_phone_says_what_the_run_did(work: Path) -> None:
    """The "🔁 Run again now" button under a failed routine's alert tells the founder what
    became of the fire — its result waiting for approval (where to decide), or the run
    failing again and why — as `companyd jobs run` says it, not "started routine X"
    whatever happened.
    """
    failing = {"on": True}

    def model(request: Any) -> Any:
        if failing["on"]:
            return fault(400, "prompt is malformed (injected)")
        return reply_text("Flash sale today: every plan 20% off.")

    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _without_tools(_approval_company(work, bot))
            async with _daemon(cfg, work, srv) as daemon:
                first = await daemon.call("run_job", routine="daily-post")
                assert first["state"] == "ended" and first["status"] != "ok", first
                alert = await _message(bot, "routine daily-post failed")
                again = _button(alert, "Run again now")

                async def pressed(n: int) -> str:
                    bot.press_button(FOUNDER, alert.message_id, again)
                    await bot.wait_for(lambda: len(bot.callback_answers) >= n, timeout=30)
                    return str(bot.callback_answers[n - 1].get("text") or "")

                failing["on"] = False
                said = await pressed(1)
                items = (await daemon.call("inbox"))["items"]
                [item] = [i["id"] for i in items if i["kind"] == "result"]
                assert said.startswith(
                    f"started routine daily-post: its run ended and the result waits for your "
                    f"approval as {item}"
                ), said
                assert (await daemon.cli("approve", item)).rc == 0
                # that fire over: room for the next
                await _fire_ended(daemon, "daily-post", timeout=30)

                failing["on"] = True
                said = await pressed(2)
                runs = (await daemon.call("runs", routine="daily-post"))["runs"]
                [run] = [r for r in runs if f"({r['run_id']})" in said]
                assert run["status"] != "ok" and run["reason"], run
                ran = f"ran routine daily-post: {run['status']} ({run['run_id']}): "
                assert said.startswith(ran), said  # the toast: at most 200 characters

                def footer() -> bool:  # the alert edited: what was done, in full
                    shown = bot.find_message(FOUNDER, alert.message_id)
                    return shown is not None and f"✔ {ran}{run['reason']}" in shown.text

                await bot.wait_for(footer, timeout=30)
                await daemon.stop()


@pytest.mark.anyio
async def test_run_again_on_the_phone_says_a_long_run_goes_on(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that outlasts the phone's wait for an answer is not "no answer; try again" (a
    second press would skip, or run the routine twice): the founder is told it started
    and goes on, and nothing runs twice.
    """
    monkeypatch.setattr("companyd.alerts._ops.ADMIN_TIMEOUT", 1.0)  # a long run, quickly
    mode, model = _fails_then_stalls()

    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _without_tools(_approval_company(work, bot))
            async with _daemon(cfg, work, srv) as daemon:
                await daemon.call("run_job", routine="daily-post")
                alert = await _message(bot, "routine daily-post failed")
                mode["now"] = "stall"
                bot.press_button(FOUNDER, alert.message_id, _button(alert, "Run again now"))
                await bot.wait_for(lambda: bool(bot.callback_answers), timeout=30)
                said = bot.callback_answers[0]
                assert said.get("text") == (
                    "started routine daily-post; its run has not ended within 1 s and goes "
                    "on: /jobs shows its outcome once it ends"
                ), said
                assert not said.get("show_alert"), said
                srv.release_stalls()
                async with asyncio.timeout(30):  # it went on: its result waits for approval
                    while not [
                        i for i in (await daemon.call("inbox"))["items"] if i["kind"] == "result"
                    ]:
                        await asyncio.sleep(0.05)
                fires = (await daemon.call("job_history", routine="daily-post"))["fires"]
                assert len(fires) == 2, fires
                await daemon.stop()


def _posts_the_sale(then: str | None = "Posted the flash sale.") -> list[Reply]:
    """Marketing's replies: a post_update call (the tool that waits for the founder), then
    ``then`` once it has run (None: nothing after it).
    """
    replies = [reply_tool_use("post_update", {"text": "Flash sale!"}, text="Posting the sale.")]
    return replies if then is None else [*replies, reply_text(then)]


def _ceo_consults_on_the_sale(answer: str) -> PerAgent:
    """The model of :func:`_consulting_company`: ceo consults marketing on the flash sale and
    then says ``answer``; marketing posts it (:func:`_posts_the_sale`).
    """
    return PerAgent(
        ceo=[
            reply_tool_use("consult", {"agent": "marketing", "question": "Post the flash sale."}),
            reply_text(answer),
        ],
        marketing=_posts_the_sale(),
    )


def _consulting_company(work: Path, bot: BotApiServer, tool_log: Path) -> Path:
    """:func:`_company` with a ``ceo`` who consults marketing (who may ask the founder),
    and ceo's ``daily-post``.
    """
    cfg = _company(work, bot, tool_log)
    doc = yaml.safe_load(cfg.read_text())
    doc["agents"]["marketing"]["reports_to"] = "ceo"
    doc["agents"]["marketing"]["tools"]["ask_founder"] = True
    doc["agents"]["ceo"] = {
        "title": "CEO",
        "instructions": "You are the ceo.",
        "consult": ["marketing"],
    }
    doc["routines"] = {
        "daily-post": {
            "assignee": "ceo",
            "description": "Have the flash sale announced.",
            "trigger": {"cron": "0 3 29 2 *"},
        }
    }
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    return cfg


#: (the asking run's tool, what the colleague's run waits for, how the daemon stops)
_WAITS = [
    ("consult", "approval", "sigterm"),
    ("delegate", "approval", "sigterm"),
    ("consult", "question", "sigterm"),
    ("consult", "approval", "kill-9"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("asks", "waits", "stop"), _WAITS, ids=["-".join(w) for w in _WAITS])
async def test_a_colleague_waiting_for_the_founder_survives_a_restart(
    work: Path, asks: str, waits: str, stop: str
) -> None:
    """A routine's run consulted (or delegated to) a colleague whose run waits for the
    founder — a tool call to approve, or an ``ask_founder`` question — when the daemon is
    stopped (SIGTERM; or killed): both runs stop at a checkpoint at once (the stop does not
    wait out the agent stop limit), and after the restart the founder's answer on the message sent
    before the stop (Approve, a reply) goes to the colleague's run, its result reaches the
    asking run, and the fire ends ``ok`` — as a direct approval does (docs/desk.md,
    "Colleagues across a restart").

    One run each, counted once nothing is in flight: the resumed asking run rejoins its
    colleague's resumed run (``Colleagues.rejoin``). Checked: submitting the colleague's
    task anew there instead (its ``held`` closed, so no unawaited-coroutine warning speaks
    for the test) fails the run count in all four parameters; before, it was caught only
    by the side effects of the second run (the last request not the asker's, five model
    calls served), each by chance of timing.
    """
    tool_log = tool_files(work) / "tool.log"
    ask = (
        {"agent": "marketing", "question": "Post the flash sale."}
        if asks == "consult"
        else {"agent": "marketing", "task": "Post the flash sale."}
    )
    wait = (
        reply_tool_use("post_update", {"text": "Flash sale!"}, text="Posting the sale.")
        if waits == "approval"
        else reply_tool_use("ask_founder", {"question": "Flash sale: 20% or 30% off?"})
    )
    model = PerAgent(
        ceo=[reply_tool_use(asks, ask), reply_text("Marketing posted the flash sale.")],
        marketing=[wait, reply_text("Posted the flash sale.")],
    )
    needle = "marketing wants to call post_update" if waits == "approval" else "20% or 30% off?"
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_log)
            first = _signalled(cfg, work, srv)
            second: InProcessDaemon | None = None
            try:
                await first.start(timeout=START_TIMEOUT)

                firing = _fire(first, "daily-post")
                asked = await _message(bot, needle)
                item_id = re.findall(r"\((ap-[0-9a-f]+|q-[0-9a-f]+)\)", asked.text)[0]
                assert f"{item_id}  {waits}" in (await _cli_of(first, "inbox")).out
                began = asyncio.get_running_loop().time()
                if stop == "sigterm":
                    assert await first.stop(timeout=60) == 0
                else:
                    first.send_signal(signal.SIGKILL)
                    await first.wait(10)
                took = asyncio.get_running_loop().time() - began
                await firing

                second = _restarted(cfg, work, srv)
                await second.start(timeout=START_TIMEOUT)
                inbox = await second.cli("inbox")
                assert f"{item_id}  {waits}" in inbox.out, inbox.out  # still asked
                if waits == "approval":
                    bot.press_button(FOUNDER, asked.message_id, _button(asked, "Approve"))
                else:
                    _reply(bot, asked, "20%")
                await _fire_ended(second, "daily-post")
                fires = (await second.call("job_history", routine="daily-post"))["fires"]
                await second.quiet()  # a second request, were there one, is made by now
                runs = (await second.call("runs"))["runs"]  # and a second run has shown
            finally:
                await _stop_both(first, second)
    # one run each: the resumed asking run rejoined its colleague's resumed run (the task
    # the journal holds) instead of submitting that task anew beside it
    assert sorted((r["agent"], r["status"]) for r in runs) == [
        ("ceo", "ok"),
        ("marketing", "ok"),
    ], runs
    assert len(_to_founder(bot, needle)) == 1  # asked once
    if waits == "approval":
        assert _started(tool_log) == ["started Flash sale!"]  # approved: it ran, once
    else:
        said = [r["content"] for q in srv.requests for r in tool_results(q)]
        assert "The founder answered: 20%" in said
    by_agent = {r["agent"]: r for r in runs}
    assert by_agent["marketing"]["status"] == "ok", by_agent["marketing"]
    assert by_agent["marketing"]["answer"] == "Posted the flash sale."
    assert fires[0]["outcome"] == "ok"
    # the asking run got the colleague's answer, not "outcome unknown"
    got = tool_results(srv.requests[-1])[0]["content"]
    if asks == "consult":
        assert got == "Posted the flash sale."
    else:
        assert json.loads(got)["status"] == "ok" and json.loads(got)["result"] == (
            "Posted the flash sale."
        )
    assert srv.served == 4  # no model call paid twice
    # both runs stopped at a checkpoint at once, not by the agent stop limit's cancellation
    assert took < AGENT_SHUTDOWN, f"the stop took {took:.1f} s"


@pytest.mark.anyio
async def test_an_approval_of_a_colleague_no_longer_waited_for_is_withdrawn(work: Path) -> None:
    """The asking run stops waiting for its colleague (its colleague_timeout_seconds passes)
    while the colleague's run waits for the founder's approval: the colleague's task is
    withdrawn, and so is the approval — its Telegram message loses the buttons that would
    now do nothing and says why, it leaves the inbox, and a late `companyd approve` is
    refused with the reason instead of "approving" a call that never runs.
    """
    tool_log = tool_files(work) / "tool.log"
    model = _ceo_consults_on_the_sale("Marketing did not answer; the sale is not announced.")
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_log)
            doc = yaml.safe_load(cfg.read_text())
            doc["agents"]["ceo"]["colleague_timeout_seconds"] = 60
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            async with _daemon(cfg, work, srv) as daemon:
                got = await daemon.call("run_job", routine="daily-post")
                item = got["approval_item"]
                asked = await _message(bot, "marketing wants to call post_update")
                await daemon.advance(61)
                await _fire_ended(daemon, "daily-post")
                await bot.wait_for(lambda: not _buttons_now(bot, asked), timeout=30)
                footer = _footers(bot, asked)[-1]
                inbox = await daemon.cli("inbox")
                late = await daemon.cli("approve", item)
                runs = {r["agent"]: r for r in (await daemon.call("runs"))["runs"]}
                await daemon.stop()
    assert footer.startswith("✔ withdrawn: the run that asked no longer waits for it at ")
    assert item not in inbox.out
    assert late.rc != 0
    assert f"approval {item} was withdrawn (the asker stopped waiting: marketing did not " in (
        late.err + late.out
    )
    assert _started(tool_log) == []  # never ran
    assert runs["marketing"]["status"] == "cancelled"
    assert runs["marketing"]["reason"].startswith("withdrawn: the asker stopped waiting")
    assert "the task was withdrawn" in tool_results(srv.requests[-1])[0]["content"]


@pytest.mark.anyio
async def test_a_review_in_flight_does_not_hold_the_stop(work: Path) -> None:
    """A routine's run whose result is being reviewed (``reviewer``) when the daemon is
    stopped: the stop does not wait out the agent stop limit for a review the restart
    withdraws anyway; after the restart the resumed run asks for a new review, and the fire
    ends ``ok`` on its verdict. The founder's ``companyd jobs run`` that waited for the fire
    is answered at the stop with the truth (exit 75: its run stops at a checkpoint and
    resumes), not held by the control socket's drain and then cut off; so is a second one,
    whose fire waited its turn (``concurrency: queue``) and is cancelled, not run, and one
    of the CEO's routine, whose task waits in the CEO's queue and runs after the restart.
    """
    verdict = reply_text("APPROVE: clear and correct.")  # the review's, and the routine's
    model = PerAgent(
        marketing=[reply_text("Draft: flash sale, 20% off.")],
        ceo=[stall(None), verdict, verdict],
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_files(work) / "tool.log")
            doc = yaml.safe_load(cfg.read_text())
            doc["routines"]["daily-post"] |= {
                "assignee": "marketing",
                "reviewer": "ceo",
                "concurrency": "queue",
            }
            doc["routines"]["weekly"] = {
                "assignee": "ceo",
                "description": "Sum up the week.",
                "trigger": {"cron": "0 3 29 2 *"},
            }
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            first = _signalled(cfg, work, srv)
            second: InProcessDaemon | None = None
            fires: list[dict[str, Any]] = []
            try:
                await first.start(timeout=START_TIMEOUT)

                firing = asyncio.create_task(_cli_of(first, "jobs", "run", "daily-post"))
                await asyncio.to_thread(srv.wait_for_requests, 2, 60.0)  # the review's call
                # (the CLI in a thread runs one command at a time: this one is a client's)
                queued = asyncio.create_task(_answer(first, "run_job", routine="daily-post"))
                behind = asyncio.create_task(_answer(first, "run_job", routine="weekly"))
                async with asyncio.timeout(30):  # the daemon has taken both requests …
                    while len(_logged(first, "control: run_job")) < 3:
                        await asyncio.sleep(0.05)
                    # … and the CEO's task is journaled, queued behind its stalled review
                    while not (await first.call("tasks"))["tasks"][2:]:
                        await asyncio.sleep(0.05)
                began = asyncio.get_running_loop().time()
                assert await first.stop(timeout=60) == 0
                took = asyncio.get_running_loop().time() - began
                srv.release_stalls()
                waited, turn, later = await firing, await queued, await behind

                second = _restarted(cfg, work, srv)
                await second.start(timeout=START_TIMEOUT)
                async with asyncio.timeout(60):  # the resumed fire ends (the newest is not it)
                    while not any(f["outcome"] == "ok" for f in fires):
                        await asyncio.sleep(0.05)
                        got = await second.call("job_history", routine="daily-post")
                        fires = got["fires"]
                await _fire_ended(second, "weekly")
                weekly = (await second.call("job_history", routine="weekly"))["fires"]
            finally:
                await _stop_both(first, second)
    [ran] = [f for f in fires if f["outcome"] == "ok"]
    assert [f["outcome"] for f in fires if f is not ran] == ["cancelled"]
    assert model.seen == ["marketing", "ceo", "ceo", "ceo"]  # the draft was not made again
    assert [f["outcome"] for f in weekly] == ["ok"]
    assert took < AGENT_SHUTDOWN, f"the stop took {took:.1f} s"
    # the stop did not wait the control socket's drain out for the waiting `jobs run` …
    assert [m for m in _logged(first, "control:") if "at shutdown" in m] == []
    # … which was told at once what became of its run, as "not over yet"
    assert waited.rc == EX_TEMPFAIL, (waited.rc, waited.out, waited.err)
    assert waited.err.strip() == (
        f"companyd: the daemon is stopping: run {ran['run_id']} of routine daily-post "
        "stops at a checkpoint (its step in flight finishes first) and resumes when the "
        f"daemon starts again; see `companyd runs show {ran['run_id']}`"
    )
    assert turn == {
        "ok": False,
        "code": "stopping",
        "error": "the daemon is stopping: routine daily-post's fire had not started its run "
        "and is recorded cancelled (see `companyd jobs history daily-post`); run `companyd "
        "jobs run daily-post` again once the daemon has started",
    }
    [task] = re.findall(r"task (task-[0-9a-f]{12})", later.get("error", ""))
    assert later == {
        "ok": False,
        "code": "stopping",
        "error": f"the daemon is stopping: routine weekly's task {task} waits in its agent's "
        "queue and runs when the daemon starts again (see `companyd runs`)",
    }
    # the founder's actions are recorded as done (the fires were made), as told
    acted = [e["data"] for e in first.events("operator_action")]
    assert [(a["action"], a["ok"]) for a in acted] == [("run_job", True)] * 3
    told = [waited.err[10:-1], turn["error"], later["error"]]
    assert sorted(a["message"] for a in acted) == sorted(told)


@pytest.mark.anyio
async def test_an_approval_of_a_run_ended_while_the_daemon_was_down_is_withdrawn(
    work: Path,
) -> None:
    """The agent whose run waits for an approval is removed from company.yaml while the
    daemon is down: at the start its run is closed, and so is the approval — its message
    loses the Approve that would do nothing and says why, a late approve is refused with the
    reason.
    """
    tool_log = tool_files(work) / "tool.log"
    model = PerAgent(
        marketing=_posts_the_sale(then=None),
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_log)
            async with _daemon(cfg, work, srv) as daemon:
                asking = asyncio.create_task(daemon.cli("ask", "marketing", "Post the flash sale."))
                asked = await _message(bot, "marketing wants to call post_update")
                item = re.findall(r"\((ap-[0-9a-f]+)\)", asked.text)[0]
                await daemon.stop()
            stopped = await asking
            # the `companyd ask` that waited is told at once, as "not over yet" (exit 75)
            assert stopped.rc == EX_TEMPFAIL, (stopped.rc, stopped.err)
            assert re.fullmatch(
                r"companyd: the daemon is stopping; task task-[0-9a-f]{12} is journaled and "
                r"marketing resumes it after the restart \(see `companyd runs`\)\n",
                stopped.err,
            ), stopped.err
            # and the ask is recorded as done (its task goes on), not as refused
            [acted] = [e["data"] for e in daemon.events("operator_action")]
            assert (acted["action"], acted["ok"]) == ("ask", True), acted
            doc = yaml.safe_load(cfg.read_text())
            del doc["agents"]["marketing"]
            del doc["agents"]["ceo"]["consult"]
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            async with _daemon(cfg, work, srv) as daemon:
                await bot.wait_for(lambda: not _buttons_now(bot, asked), timeout=30)
                inbox = await daemon.cli("inbox")
                late = await daemon.cli("approve", item)
                await daemon.stop()
    _assert_withdrawn(bot, asked, item, inbox, late, "its agent is no longer in company.yaml")
    assert _started(tool_log) == []


@pytest.mark.anyio
async def test_an_approval_of_a_colleague_given_up_on_after_a_restart_is_withdrawn_at_once(
    work: Path,
) -> None:
    """The CEO consults marketing, whose run waits for the founder's approval; the daemon stops
    (both runs at a checkpoint) and starts again with marketing switched off, so its run is
    not resumed. When ceo's resumed wait runs out, marketing's task is withdrawn in the
    journal only — and its approval is closed at that moment, with the reason: the message
    loses the buttons that would do nothing, the inbox drops it, a late approve is refused
    (it used to stay live until the next start or reload, and `approve` said "approved").
    """
    model = PerAgent(
        ceo=[
            reply_tool_use("consult", {"agent": "marketing", "question": "Note the flash sale."}),
            reply_text("Marketing did not answer; the sale is not noted."),
        ],
        marketing=[reply_tool_use("add_observations", {"observations": []})],
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_files(work) / "tool.log")
            doc = yaml.safe_load(cfg.read_text())
            # a built-in tool needs the approval: no tool server to start
            del doc["agents"]["marketing"]["mcp_servers"]
            doc["agents"]["marketing"]["tools"]["require_approval"] = ["add_observations"]
            doc["agents"]["ceo"]["colleague_timeout_seconds"] = 60
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            async with _daemon(cfg, work, srv) as daemon:
                asking = _ask(daemon, "ceo", "Have the flash sale noted.")
                asked = await _message(bot, "marketing wants to call add_observations")
                item = re.findall(r"\((ap-[0-9a-f]+)\)", asked.text)[0]
                await daemon.stop()
            await asking
            doc["agents"]["marketing"]["enabled"] = False
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            async with _daemon(cfg, work, srv) as daemon:
                # ceo's resumed call waits for marketing again, gives up after 60 s and
                # answers (its second model call)
                await daemon.advance_until(lambda: srv.served == 3, limit=250)
                await bot.wait_for(lambda: not _buttons_now(bot, asked), timeout=10)
                inbox = await daemon.cli("inbox")
                late = await daemon.cli("approve", item)
                await daemon.stop()
    _assert_withdrawn(
        bot,
        asked,
        item,
        inbox,
        late,
        "the asker stopped waiting: marketing did not answer within 60 s",
    )


@pytest.mark.anyio
async def test_an_approval_of_an_agent_removed_by_a_reload_is_withdrawn(work: Path) -> None:
    """A reload removes the agent whose run waits for an approval: its run is closed, and so
    is the approval — no Approve left that would do nothing.
    """
    tool_log = tool_files(work) / "tool.log"
    model = PerAgent(
        marketing=_posts_the_sale(then=None),
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_log)
            async with _daemon(cfg, work, srv) as daemon:
                asking = _ask(daemon, "marketing", "Post the flash sale.")
                asked = await _message(bot, "marketing wants to call post_update")
                item = re.findall(r"\((ap-[0-9a-f]+)\)", asked.text)[0]
                doc = yaml.safe_load(cfg.read_text())
                del doc["agents"]["marketing"]
                del doc["agents"]["ceo"]["consult"]
                cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
                reloaded = await daemon.cli("reload")
                assert reloaded.rc == 0, reloaded.err
                await asking
                await bot.wait_for(lambda: not _buttons_now(bot, asked), timeout=30)
                late = await daemon.cli("approve", item)
                await daemon.stop()
    assert _footers(bot, asked)[-1].startswith(
        "✔ withdrawn: the run that asked no longer waits for it at "
    )
    assert late.rc != 0
    assert f"approval {item} was withdrawn (its run ended: withdrawn: its agent was removed" in (
        late.err + late.out
    )
    assert _started(tool_log) == []


@pytest.mark.anyio
async def test_a_consultation_whose_asker_was_removed_is_withdrawn_with_its_approval(
    work: Path,
) -> None:
    """The daemon stops while ceo's run waits on marketing, whose run waits for an approval;
    ceo is removed from company.yaml before the start. Nobody will read marketing's answer:
    the consultation is withdrawn at the start (not resumed to wait for the founder), and
    its approval is closed with the reason.
    """
    tool_log = tool_files(work) / "tool.log"
    model = PerAgent(
        ceo=[reply_tool_use("consult", {"agent": "marketing", "question": "Post the sale."})],
        marketing=_posts_the_sale(then=None),
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_log)
            async with _daemon(cfg, work, srv) as daemon:
                await daemon.call("run_job", routine="daily-post")
                asked = await _message(bot, "marketing wants to call post_update")
                item = re.findall(r"\((ap-[0-9a-f]+)\)", asked.text)[0]
                await daemon.stop()
            doc = yaml.safe_load(cfg.read_text())
            del doc["agents"]["ceo"]
            del doc["agents"]["marketing"]["reports_to"]
            del doc["routines"]
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            async with _daemon(cfg, work, srv) as daemon:
                await bot.wait_for(lambda: not _buttons_now(bot, asked), timeout=30)
                late = await daemon.cli("approve", item)
                runs = (await daemon.call("runs", agent="marketing"))["runs"]
                await daemon.stop()
    assert late.rc != 0
    assert f"approval {item} was withdrawn (its run ended: withdrawn: the daemon restarted" in (
        late.err + late.out
    )
    assert runs[0]["status"] == "cancelled", runs
    assert _started(tool_log) == []


@pytest.mark.anyio
async def test_parallel_delegations_answered_in_any_order_after_a_restart_all_reach_the_asker(
    work: Path,
) -> None:
    """The ceo delegated to marketing (waiting for an approval) and sales (waiting for an
    answer) in one turn when the daemon stopped. After the restart the founder answers
    sales first, then approves marketing: the resumed ceo run gets both results — the one
    that ended while it still waited for the other too — not "outcome unknown".
    """
    tool_log = tool_files(work) / "tool.log"
    both = reply_tool_use("delegate", {"agent": "marketing", "task": "Post the flash sale."})
    second = reply_tool_use("delegate", {"agent": "sales", "task": "Get the discount."})
    both = dataclasses.replace(both, content=both.content + second.content)
    model = PerAgent(
        ceo=[both, reply_text("Both done.")],
        marketing=_posts_the_sale(),
        sales=[
            reply_tool_use("ask_founder", {"question": "Discount: 20% or 30%?"}),
            reply_text("The discount is 20%."),
        ],
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_log)
            doc = yaml.safe_load(cfg.read_text())
            doc["agents"]["sales"] = {
                "title": "Sales",
                "instructions": "You are sales.",
                "reports_to": "ceo",
                "tools": {"ask_founder": True},
            }
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            async with _daemon(cfg, work, srv) as daemon:
                await daemon.call("run_job", routine="daily-post")
                approval = await _message(bot, "marketing wants to call post_update")
                question = await _message(bot, "Discount: 20% or 30%?")
                await daemon.stop()
            async with _daemon(cfg, work, srv) as daemon:
                _reply(bot, question, "20%")
                async with asyncio.timeout(30):
                    while not [
                        r
                        for r in (await daemon.call("runs", agent="sales"))["runs"]
                        if r["status"] == "ok"
                    ]:
                        await asyncio.sleep(0.05)
                bot.press_button(FOUNDER, approval.message_id, _button(approval, "Approve"))
                await _fire_ended(daemon, "daily-post")
                await daemon.stop()
    got = {r["tool_use_id"]: r["content"] for r in tool_results(srv.requests[-1])}
    results = sorted(json.loads(c)["result"] for c in got.values())
    assert results == ["Posted the flash sale.", "The discount is 20%."], got
    assert _started(tool_log) == ["started Flash sale!"]


@pytest.mark.anyio
async def test_a_delegation_withdrawn_while_the_daemon_was_down_tells_the_asker_why(
    work: Path,
) -> None:
    """The ceo's run waits on a delegation to marketing when the daemon stops; marketing is
    removed from company.yaml before the start, so its task is withdrawn there. The resumed
    ceo run gets the delegation's real outcome — cancelled, and why — not "outcome
    unknown".
    """
    tool_log = tool_files(work) / "tool.log"
    model = PerAgent(
        ceo=[
            reply_tool_use("delegate", {"agent": "marketing", "task": "Post the flash sale."}),
            reply_text("Marketing is gone; nothing was posted."),
        ],
        marketing=_posts_the_sale(then=None),
    )
    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _consulting_company(work, bot, tool_log)
            doc = yaml.safe_load(cfg.read_text())
            doc["agents"]["sales"] = {
                "title": "Sales",
                "instructions": "You are sales.",
                "reports_to": "ceo",
            }
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            async with _daemon(cfg, work, srv) as daemon:
                await daemon.call("run_job", routine="daily-post")
                await _message(bot, "marketing wants to call post_update")
                await daemon.stop()
            doc = yaml.safe_load(cfg.read_text())
            del doc["agents"]["marketing"]
            del doc["agents"]["ceo"]["consult"]
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            async with _daemon(cfg, work, srv) as daemon:
                await _fire_ended(daemon, "daily-post")
                await daemon.stop()
    got = json.loads(tool_results(srv.requests[-1])[0]["content"])
    assert (got["agent"], got["status"]) == ("marketing", "cancelled"), got
    assert got["reason"] == "withdrawn: its agent is no longer in company.yaml", got


@pytest.mark.anyio
async def test_run_again_on_the_phone_while_the_daemon_stops_says_what_became_of_it(
    work: Path,
) -> None:
    """The "🔁 Run again now" button pressed before a stop and again during it. The first fire's run
    is in flight when the stop begins: the founder is told it stops at a checkpoint and
    resumes, recorded on the alert as done (it was started). The second press finds the
    stop refusing new fires: nothing was started, said as what it is — with what to do on
    the phone (tap again once the daemon is back), not the CLI's command.
    """
    mode, model = _fails_then_stalls()

    async with BotApiServer(token=TOKEN) as bot:
        with MessagesAPIServer(responder=model) as srv:
            cfg = _without_tools(_approval_company(work, bot))
            async with _daemon(cfg, work, srv) as daemon:
                await daemon.call("run_job", routine="daily-post")
                alert = await _message(bot, "routine daily-post failed")
                again = _button(alert, "Run again now")
                mode["now"] = "stall"
                bot.press_button(FOUNDER, alert.message_id, again)
                await asyncio.to_thread(srv.wait_for_requests, 3, 30.0)  # its run's call
                stopping = asyncio.create_task(daemon.stop())
                await bot.wait_for(lambda: len(bot.callback_answers) == 1, timeout=30)
                # the stop waits for that call's answer (its grace, on the daemon's clock)
                clock = daemon.clock
                async with asyncio.timeout(30):
                    while clock.next_deadline() != clock.monotonic() + STOP_CALL_GRACE:
                        await asyncio.sleep(0.01)
                bot.press_button(FOUNDER, alert.message_id, again)
                await bot.wait_for(lambda: len(bot.callback_answers) == 2, timeout=30)
                fired, refused = bot.callback_answers
                if not fired.get("show_alert"):  # told as done: its footer follows
                    await bot.wait_for(
                        lambda: f"✔ {fired.get('text')}"[:60] in "\n".join(_footers(bot, alert)),
                        timeout=30,
                    )
                footers = _footers(bot, alert)
                # the control socket stopped first: the CLI meanwhile is told the daemon
                # stops (75), not that none runs
                by_cli = await daemon.cli("jobs", "run", "daily-post", "--json")
                srv.release_stalls()
                clock.advance(STOP_CALL_GRACE)
                await stopping
    assert str(fired.get("text")).startswith("the daemon is stopping: run run-"), fired
    assert "of routine daily-post stops at a checkpoint" in str(fired.get("text")), fired
    assert not fired.get("show_alert"), fired  # done: the alert's footer says so
    assert [f for f in footers if f.startswith("✔ the daemon is stopping: run run-")], footers
    assert refused.get("text") == (
        "the daemon is stopping; routine daily-post was not fired — tap 🔁 Run again now "
        "once the daemon has started"
    ), refused
    assert [f for f in footers if "was not fired" in f] == []  # nothing done: no footer
    assert by_cli.rc == EX_TEMPFAIL, by_cli
    assert json.loads(by_cli.out)["code"] == "stopping", by_cli
    assert by_cli.err.startswith("companyd: the daemon is stopping"), by_cli
