"""``companyd telegram setup`` against the Bot API stand-in (the real python-telegram-bot):
the token is checked (the bot's name is said), the founder's message gives the chat id, the
id is written into the service's environment file (other lines kept) and a test message
reaches that chat; each failure says what to do.

The founder's whole run (the message sent while the command waits) is a real process, as
the founder starts it. The other cases run the CLI's entry point in this process with the
environment the process would get (:func:`.clikit.cli_here`): the same command, without an
interpreter's start-up and python-telegram-bot's imports each.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.testing.bot_api import BotApiServer

from .clikit import cli_here

pytestmark = pytest.mark.anyio

TOKEN = "123456:setup-stand-in-token-abcdefghijklmnop"


def company(tmp: Path, api_url: str, *, chat_env: str | None = "TELEGRAM_CHAT_ID") -> Path:
    telegram: dict[str, Any] = {"bot_token_env": "TELEGRAM_BOT_TOKEN", "api_url": api_url}
    if chat_env:
        telegram["chat_ids_env"] = chat_env
    doc = {
        "schema": "companyd/v1",
        "company": {"name": "Acme Ops", "timezone": "UTC", "budget": {"daily_usd": 5}},
        "agents": {"ceo": {"title": "CEO", "instructions": "lead"}},
        "alerts": {"telegram": telegram},
    }
    path = tmp / "company.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def setup_env(token: str | None = TOKEN) -> dict[str, str]:
    """This environment without Telegram's variables or credentials, with ``token``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TELEGRAM_")}
    if token is not None:
        env["TELEGRAM_BOT_TOKEN"] = token
    env.pop("CREDENTIALS_DIRECTORY", None)
    return env


async def setup(config: Path, *args: str, token: str | None = TOKEN) -> asyncio.subprocess.Process:
    env = setup_env(token)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "companyd", "telegram", "setup", "--config", str(config), *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def finish(proc: asyncio.subprocess.Process) -> tuple[int, str, str]:
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def setup_here(config: Path, *args: str, token: str | None = TOKEN) -> tuple[int, str, str]:
    """:func:`setup` then :func:`finish`, by the CLI's entry point in this process (in a
    thread: the command runs its own event loop while the stand-in answers in this one).
    """
    argv = ["telegram", "setup", "--config", str(config), *args]
    async with asyncio.timeout(60):
        got = await asyncio.to_thread(cli_here, argv, setup_env(token))
    return got.rc, got.out, got.err


async def test_setup_finds_the_chat_writes_it_and_sends_a_test_message(tmp_path: Path) -> None:
    async with BotApiServer(token=TOKEN, bot_username="acme_ops_bot") as bot:
        config = company(tmp_path, bot.url)
        env_file = tmp_path / "companyd.env"
        env_file.write_text("ANTHROPIC_API_KEY=sk-ant-x\nTELEGRAM_CHAT_ID=1\n# a comment\n")
        proc = await setup(config, "--env-file", str(env_file), "--wait", "30")
        # the founder sends "hello" once setup listens
        await bot.wait_for(lambda: bot.polling > 0, timeout=30)
        update = bot.inject_command(4242, "hello", first_name="Ada", username="ada")
        code, out, err = await finish(proc)
        assert code == 0, (out, err)
        assert "the token works: the bot is @acme_ops_bot" in out
        assert "send it any message" in out
        assert "received a message from @ada: 'hello' — chat id 4242" in out
        assert f"wrote TELEGRAM_CHAT_ID=4242 to {env_file}" in out
        assert "check your phone" in out
        assert TOKEN not in out + err
        # the line is replaced, every other line kept, the file private
        assert env_file.read_text() == (
            "ANTHROPIC_API_KEY=sk-ant-x\nTELEGRAM_CHAT_ID=4242\n# a comment\n"
        )
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        # the test message reached the chat
        sent = [m for m in bot.messages if m.chat_id == 4242]
        assert len(sent) == 1 and "Acme Ops" in sent[0].text and "connected" in sent[0].text
        # the "hello" was confirmed: the daemon will not read it again
        offsets = [int(c.params.get("offset") or 0) for c in bot.calls_of("getUpdates")]
        assert max(offsets) > update


async def test_without_env_file_it_prints_the_line_and_what_company_yaml_lacks(
    tmp_path: Path,
) -> None:
    async with BotApiServer(token=TOKEN) as bot:
        config = company(tmp_path, bot.url, chat_env=None)
        bot.inject_command(-100777, "hi")  # sent before setup started: read as well
        code, out, err = await setup_here(config, "--wait", "10", "--json")
        assert code == 0, err
        result = json.loads(out)
        assert result["chat_id"] == -100777 and result["env_line"] == "TELEGRAM_CHAT_ID=-100777"
        assert result["env_file"] is None and result["config_names_env"] is False
        code, out, err = await setup_here(config, "--wait", "1")
        assert code == 1  # the "hi" was confirmed by the first run: nothing new now
        assert "no message reached the bot within 1 s" in err


async def test_text_output_without_env_file(tmp_path: Path) -> None:
    async with BotApiServer(token=TOKEN) as bot:
        config = company(tmp_path, bot.url, chat_env=None)
        bot.inject_command(4242, "hi")
        code, out, err = await setup_here(config, "--wait", "10")
        assert code == 0, err
        assert "add this line to the service's environment file" in out
        assert "TELEGRAM_CHAT_ID=4242" in out and "export TELEGRAM_CHAT_ID=4242" in out
        assert "under alerts.telegram add `chat_ids_env: TELEGRAM_CHAT_ID`" in out


async def test_a_wrong_token_or_none_says_what_to_do(tmp_path: Path) -> None:
    async with BotApiServer(token=TOKEN) as bot:
        config = company(tmp_path, bot.url)
        wrong = "123456:wrong-token-abcdefghijklmnopqrstuv"
        code, out, err = await setup_here(config, "--wait", "5", token=wrong)
        assert code == 1
        assert "was not accepted" in err and "@BotFather" in err
        assert wrong not in out + err and "Traceback" not in err
        code, out, err = await setup_here(config, "--wait", "5", token=None)
        assert code == 1
        assert "no Telegram bot token" in err and "/newbot" in err
        assert not bot.messages
