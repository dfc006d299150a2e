"""Telegram end to end (issue 9 acceptance): the real ``companyd run`` with the example
company.yaml pointed at the loopback Bot API stand-in.

The daemon is a subprocess; python-telegram-bot inside it talks HTTP to the stand-in that
runs in this test's event loop, which records every message and injects the operator's
commands as updates. The bot token and chat id reach the daemon through environment
variables, as under systemd (``EnvironmentFile=``).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.testing.bot_api import BotApiServer, SentMessage
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import CliResult, DaemonProcess
from companyd.testing.inprocess import cli_in_thread

REPO = Path(__file__).resolve().parents[2]
TOKEN = "123456789:AAH-e2e-test-secret-0123456789abcdefXYZ"
SECRET_HALF = TOKEN.split(":", 1)[1]
OPERATOR = 111
STRANGER = 222


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def example_company(api_url: str) -> dict[str, Any]:
    """The example company.yaml with its Telegram section pointed at the stand-in (and no
    quiet hours, which would hold the crash alert when the suite runs at night), its dashboard
    on a free port (the default 8470 may be another test's or the machine's own daemon's).
    """
    doc: dict[str, Any] = yaml.safe_load((REPO / "company.yaml").read_text(encoding="utf-8"))
    doc["alerts"] = {
        "min_severity": "warning",
        "telegram": {
            "api_url": api_url,
            "bot_token_env": "TELEGRAM_BOT_TOKEN",
            "chat_ids_env": "TELEGRAM_CHAT_ID",
        },
    }
    doc["dashboard"] = {"listen": "127.0.0.1:0"}
    return doc


async def cli_of(daemon: DaemonProcess, *argv: str) -> CliResult:
    """``companyd ARGV`` against the daemon by the CLI's entry point in a thread of this
    process: what the command prints from the daemon's answer is the point, not its own
    process (a second interpreter's start-up, ~0.3 s of CPU each).
    """
    full = [*argv, "--config", str(daemon.config), "--state-dir", str(daemon.state_dir)]
    async with asyncio.timeout(60):
        return await asyncio.to_thread(cli_in_thread, full)


def to(server: BotApiServer, chat: int) -> list[SentMessage]:
    return [m for m in server.messages if str(m.chat_id) == str(chat)]


async def answer(server: BotApiServer, prefix: str, skip: int = 0) -> SentMessage:
    """The operator's message number ``skip`` (0-based) starting with ``prefix``, once sent."""

    def found() -> list[SentMessage]:
        return [m for m in to(server, OPERATOR) if m.text.startswith(prefix)]

    await server.wait_for(lambda: len(found()) > skip, timeout=30)
    return found()[skip]


@pytest.mark.anyio
async def test_the_daemon_pages_the_operator_and_answers_status_only_to_them(work: Path) -> None:
    async with BotApiServer(token=TOKEN) as server:
        cfg = work / "company.yaml"
        cfg.write_text(yaml.safe_dump(example_company(server.url), sort_keys=False))
        env = {
            **os.environ,
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_CHAT_ID": str(OPERATOR),
            "COMPANYD_DEBUG": "1",
        }
        daemon = DaemonProcess(cfg, work / "s", log=work / "daemon.log", env=env, forked=True)
        try:
            await daemon.start()

            # the startup message: the operator's proof that the pager works
            await server.wait_for(
                lambda: any("companyd started" in m.text for m in to(server, OPERATOR)),
                timeout=30,
            )
            started = next(m for m in to(server, OPERATOR) if "companyd started" in m.text)
            assert "Northwind Solo" in started.text

            # /status from a stranger is ignored; from the operator it is answered. The
            # operator's command is polled after the stranger's, so once it is answered the
            # stranger's update was handled too.
            server.inject_command(STRANGER, "/status")
            server.inject_command(OPERATOR, "/status")
            reply = await answer(server, "📊")
            lines = reply.text.splitlines()
            assert lines[0].startswith("📊 Northwind Solo — running, up ")
            assert lines[1] == "8/8 agents up · 0 runs in flight · $0.00 of $10.00 today"
            assert "not plainly running:" not in lines
            assert "this month: $0.00 of $200.00" in lines
            assert any(line.endswith(" heartbeat → coo") for line in lines)
            assert to(server, STRANGER) == []

            def ignored() -> list[dict[str, Any]]:
                return [
                    r
                    for r in daemon.records()
                    if r.get("logger") == "companyd.alerts.service"
                    and f"chat {STRANGER}" in r.get("msg", "")
                ]

            # the log line is handled by then, but written by the daemon's log thread
            async with asyncio.timeout(10):
                while not ignored():
                    await asyncio.sleep(0.05)
            assert ignored()[0]["level"] == "warning"

            # an injected agent crash becomes one crash alert with the agent and the count
            assert (await daemon.call("debug", action="crash", target="cfo"))["crashed"]
            await server.wait_for(
                lambda: any("cfo crashed" in m.text for m in to(server, OPERATOR)), timeout=30
            )
            crash = next(m for m in to(server, OPERATOR) if "cfo crashed" in m.text)
            assert "cfo crashed and was restarted" in crash.text
            assert "InjectedCrash" in crash.text  # the reason
            # ... and /status now shows it
            server.inject_command(OPERATOR, "/status")
            after = await answer(server, "📊", skip=1)
            assert "  cfo: running, restarted 1×" in after.text.splitlines()

            # a graceful stop tells the operator too, before the daemon exits 0
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(40) == 0
            assert any("stopping" in m.text for m in to(server, OPERATOR))
        finally:
            if daemon.proc is not None and daemon.returncode is None:
                await daemon.stop()

    log = daemon.log_text()
    assert "Traceback" not in log
    # the token never appears in what the daemon wrote, nor in what it sent
    assert TOKEN not in log and SECRET_HALF not in log
    # not vacuous: at debug level python-telegram-bot logs the Bot API URL, token and all,
    # and the daemon's redaction replaced it
    assert "/bot<telegram-bot-token>" in log
    assert all(SECRET_HALF not in m.text for m in server.messages)
    # ... though python-telegram-bot did use it on every request to the stand-in, which
    # answers 401 to any other token
    assert server.calls_of("getMe") and all(c.status == 200 for c in server.calls_of("getMe"))


@pytest.mark.anyio
async def test_status_tells_when_commands_fail_while_sending_works(work: Path) -> None:
    """Issue 15 item 7 against the real daemon: getUpdates answered 401 while sending
    works. ``companyd status`` (text and --json) says which half works; polling keeps
    going, and once getUpdates works again commands are answered.
    """
    import json

    async with BotApiServer(token=TOKEN) as server:
        cfg = work / "company.yaml"
        cfg.write_text(yaml.safe_dump(example_company(server.url), sort_keys=False))
        env = {**os.environ, "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_CHAT_ID": str(OPERATOR)}
        daemon = DaemonProcess(cfg, work / "s", log=work / "daemon.log", env=env, forked=True)
        try:
            await daemon.start()
            await server.wait_for(
                lambda: any("companyd started" in m.text for m in to(server, OPERATOR)),
                timeout=30,
            )
            server.fail_next(10**6, status=401, method="getUpdates")

            def refused() -> int:
                return len([c for c in server.calls_of("getUpdates") if c.status == 401])

            # retried with backoff (python-telegram-bot's Updater stops after the first);
            # one retry shows it (1 s, then 2 s): each further one would double the wait.
            # The ten minutes of retries are tests/alerts/test_alerts.py's, on a ManualClock;
            # the answer to /status below shows polling went on after the refusals.
            await server.wait_for(lambda: refused() >= 2, timeout=30)
            result = await cli_of(daemon, "status", "--json")
            assert result.rc == 0, result.err
            alerts = json.loads(result.out)["alerts"]
            assert alerts["telegram"] == "ok"
            assert alerts["commands"] == "failing"
            assert alerts["commands_error"] == "401 Unauthorized"
            text = await cli_of(daemon, "status")
            line = next(x for x in text.out.splitlines() if x.startswith("Alerts:"))
            assert line.startswith("Alerts: telegram sending ok · commands failing since ")
            assert line.endswith("(401 Unauthorized)")
            server.clear_failures()
            server.inject_command(OPERATOR, "/status")
            reply = await answer(server, "📊")
            assert "commands failing" not in reply.text
        finally:
            if daemon.proc is not None and daemon.returncode is None:
                await daemon.stop()
    assert "Traceback" not in daemon.log_text()


@pytest.mark.anyio
async def test_a_rejected_reload_never_pages_the_secret_it_quotes(work: Path) -> None:
    """The attack that found it: an API key pasted into `department:` came back in the
    "change rejected" alert on Telegram. Now the alert, the reload reply and the log name
    the problem without the key, and the running key (registered by value) never shows.
    """
    pasted = "sk-ant-api03-" + "P" * 40
    running_key = "the-running-api-key-value-0123"
    async with BotApiServer(token=TOKEN) as server:
        doc = example_company(server.url)
        cfg = work / "company.yaml"
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
        env = {
            **os.environ,
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_CHAT_ID": str(OPERATOR),
            "ANTHROPIC_API_KEY": running_key,
        }
        async with DaemonProcess(
            cfg, work / "s", log=work / "daemon.log", env=env, forked=True
        ) as daemon:
            await server.wait_for(
                lambda: any("companyd started" in m.text for m in to(server, OPERATOR)),
                timeout=30,
            )
            first = next(iter(doc["agents"]))
            doc["agents"][first]["department"] = pasted
            doc["company"]["context"] = f"key {running_key} and {TOKEN}"
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            reload = await daemon.cli("reload")
            assert reload.rc == 1 and "rejected" in reload.err
            await server.wait_for(
                lambda: any("rejected" in m.text for m in to(server, OPERATOR)), timeout=30
            )
            rejected = next(m for m in to(server, OPERATOR) if "rejected" in m.text)
            assert "department" in rejected.text
    for text in (rejected.text, reload.out + reload.err, daemon.log_text()):
        assert pasted not in text and running_key not in text and SECRET_HALF not in text
