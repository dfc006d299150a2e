"""``companyd notify-failure UNIT``: the systemd OnFailure= alert.

As systemd runs it — a process of its own with the ``MONITOR_*`` variables — in the first
test, and where the claim is that the token never reaches what the process prints (the
interpreter's own messages at exit included). The other cases (where the facts come from,
what an invalid company.yaml says, the exit code without settings) run the CLI's entry
point in this process with the environment the process would get and what its stderr would
show of log records (:func:`.clikit.cli_here`): the same command without an interpreter's
start-up (and python-telegram-bot's imports) each.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import yaml

from companyd.testing.bot_api import BotApiServer

from .clikit import cli_here

TOKEN = "123456789:AAH-notify-failure-secret-0123456789abc"
CHAT = 111


def _config(tmp_path: Path, api_url: str | None, telegram: bool = True) -> Path:
    doc: dict[str, object] = {
        "schema": "companyd/v1",
        "company": {"name": "Acme", "timezone": "UTC", "budget": {"daily_usd": 10}},
        "agents": {"ceo": {"title": "CEO", "instructions": "lead"}},
    }
    if telegram:
        doc["alerts"] = {"telegram": {"chat_ids": [CHAT], "api_url": api_url}}
    path = tmp_path / "company.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _fake_systemctl(tmp_path: Path, output: str) -> Path:
    """A stand-in ``systemctl`` (a real executable on PATH) answering ``show``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "systemctl"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nassert sys.argv[1] == 'show'\nprint({output!r})\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return bindir


async def _notify(
    config: Path, env: dict[str, str], unit: str = "companyd.service"
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "companyd",
        "notify-failure",
        unit,
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _notify_here(
    config: Path, env: dict[str, str], unit: str = "companyd.service"
) -> tuple[int, str, str]:
    """:func:`_notify` by the CLI's entry point in this process (in a thread: the command
    runs its own event loop while the stand-in answers in this one).
    """
    argv = ["notify-failure", unit, "--config", str(config)]
    async with asyncio.timeout(60):
        got = await asyncio.to_thread(cli_here, argv, env)
    return got.rc, got.out, got.err


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    env["TELEGRAM_BOT_TOKEN"] = TOKEN
    env["PATH"] = f"{tmp_path / 'empty-bin'}"  # no systemctl unless a test adds one
    env.update(extra)
    return env


@pytest.mark.anyio
async def test_sends_once_with_systemds_monitor_variables(tmp_path: Path) -> None:
    async with BotApiServer(token=TOKEN) as server:
        env = _env(
            tmp_path,
            MONITOR_SERVICE_RESULT="watchdog",
            MONITOR_EXIT_CODE="killed",
            MONITOR_EXIT_STATUS="ABRT",
        )
        code, out, err = await _notify(_config(tmp_path, server.url), env)
    assert code == 0, err
    assert "sent to 1 chat(s)" in out
    (msg,) = server.messages
    assert msg.chat_id == CHAT
    assert msg.text.startswith(
        "🔴 companyd (unit companyd.service) died: watchdog timeout — the event loop stopped "
        "answering"
    )
    assert "main process: killed by signal ABRT" in msg.text
    assert "Acme · host " in msg.text
    assert TOKEN not in out + err


@pytest.mark.anyio
async def test_reads_systemctl_show_when_systemd_gives_no_variables(tmp_path: Path) -> None:
    bindir = _fake_systemctl(
        tmp_path,
        "Result=oom-kill\nExecMainCode=2\nExecMainStatus=9\nNRestarts=3\n"
        "ActiveState=activating\nSubState=auto-restart",
    )
    async with BotApiServer(token=TOKEN) as server:
        env = _env(tmp_path, PATH=str(bindir))
        code, _, err = await _notify_here(_config(tmp_path, server.url), env)
    assert code == 0, err
    (msg,) = server.messages
    assert "died: killed: out of memory" in msg.text
    assert "main process: killed by signal SIGKILL" in msg.text
    assert "restarts so far: 3" in msg.text
    assert "now: activating (auto-restart)" in msg.text


@pytest.mark.anyio
async def test_telegram_down_exits_0_and_says_why(tmp_path: Path) -> None:
    async with BotApiServer(token=TOKEN) as server:
        await server.go_down("refuse")
        code, out, err = await _notify_here(_config(tmp_path, server.url), _env(tmp_path))
    assert code == 0
    assert "alert about companyd.service not sent" in err
    assert "NetworkError" in err
    assert "Traceback" not in err
    assert TOKEN not in out + err


@pytest.mark.anyio
async def test_a_rejected_token_is_not_printed(tmp_path: Path) -> None:
    async with BotApiServer(token="1:a-different-token-entirely") as server:
        code, out, err = await _notify(_config(tmp_path, server.url), _env(tmp_path))
    assert code == 0
    assert "InvalidToken" in err
    assert "<telegram-bot-token>" in err
    assert TOKEN not in out + err
    assert TOKEN.split(":")[1] not in out + err


@pytest.mark.anyio
async def test_without_telegram_settings_exits_1_with_the_reason(tmp_path: Path) -> None:
    code, _, err = await _notify_here(_config(tmp_path, None, telegram=False), _env(tmp_path))
    assert code == 1
    assert "no 'alerts.telegram' section" in err
    env = _env(tmp_path)
    del env["TELEGRAM_BOT_TOKEN"]
    code, _, err = await _notify_here(_config(tmp_path, "http://127.0.0.1:9"), env)
    assert code == 1
    assert "$TELEGRAM_BOT_TOKEN is unset" in err
    # a file that does not parse far enough to show its alerts: not "it has no section"
    broken = tmp_path / "broken.yaml"
    broken.write_text("schema: companyd/v1\ncompany:\n    name: x\n  budget: 1\n")
    code, _, err = await _notify_here(broken, _env(tmp_path))
    assert code == 1 and "no 'alerts.telegram' section" not in err, err
    assert "its alerts.telegram settings cannot be read from the invalid file" in err


def test_the_command_is_registered(capsys: pytest.CaptureFixture[str]) -> None:
    from companyd.cli import main

    with pytest.raises(SystemExit) as info:
        main(["notify-failure", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "OnFailure=companyd-alert@%n.service" in out


@pytest.mark.anyio
async def test_an_invalid_company_yaml_is_still_reported_with_its_first_error(
    tmp_path: Path,
) -> None:
    # The daemon exits 78 at start on an invalid company.yaml and systemd runs this unit:
    # the operator must hear of it, from the alert settings that can still be read.
    async with BotApiServer(token=TOKEN) as server:
        path = _config(tmp_path, server.url)
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        doc["company"]["budget"]["daily_usd"] = "fifty"
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        env = _env(tmp_path, MONITOR_SERVICE_RESULT="exit-code", MONITOR_EXIT_STATUS="78")
        code, out, err = await _notify_here(path, env)
    assert code == 0, err
    assert "sent to 1 chat(s)" in out
    (msg,) = server.messages
    assert msg.text.startswith("🔴 companyd (unit companyd.service) died: exited with an error")
    assert "company.yaml is invalid:" in msg.text and "company.budget.daily_usd" in msg.text
    assert "'fifty'" in msg.text and "systemctl restart companyd" in msg.text
    assert "Acme · host " in msg.text
    assert "Traceback" not in err and TOKEN not in out + err


@pytest.mark.anyio
async def test_an_instance_s_invalid_company_yaml_says_to_restart_that_instance(
    tmp_path: Path,
) -> None:
    # companyd-instance-alert@acme runs `notify-failure companyd@acme.service`
    async with BotApiServer(token=TOKEN) as server:
        path = _config(tmp_path, server.url)
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        doc["company"]["budget"]["daily_usd"] = "fifty"
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        env = _env(tmp_path, MONITOR_SERVICE_RESULT="exit-code", MONITOR_EXIT_STATUS="78")
        code, _, err = await _notify_here(path, env, unit="companyd@acme.service")
    assert code == 0, err
    (msg,) = server.messages
    assert "(unit companyd@acme.service) died" in msg.text
    assert "then `systemctl restart companyd@acme`" in msg.text


@pytest.mark.anyio
async def test_an_invalid_company_yaml_never_sends_a_secret_it_quotes(tmp_path: Path) -> None:
    """An API key pasted where a key belongs (its first error quotes it) is never repeated,
    neither on Telegram nor on stderr.
    """
    key = "sk-ant-api03-" + "N" * 40
    async with BotApiServer(token=TOKEN) as server:
        path = _config(tmp_path, server.url)
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        doc["agents"]["ceo"][key] = 1
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        env = _env(tmp_path, MONITOR_SERVICE_RESULT="exit-code", MONITOR_EXIT_STATUS="78")
        code, out, err = await _notify_here(path, env)
    assert code == 0, err
    (msg,) = server.messages
    assert "company.yaml is invalid:" in msg.text
    for text in (msg.text, out, err):
        assert key not in text and TOKEN not in text and TOKEN.split(":")[1] not in text
