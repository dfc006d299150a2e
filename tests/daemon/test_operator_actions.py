"""Records are true (issue 28): every operator action that changes the company's state is
an ``operator_action`` event with ``via`` where it was made — the CLI (through the entry
point and the control socket) and Telegram (a command typed, a button pressed, through
python-telegram-bot and the Bot API stand-in) as the dashboard's own are.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.errors import EX_TEMPFAIL
from companyd.events import BudgetThreshold
from companyd.testing.bot_api import BotApiServer, SentMessage
from companyd.testing.daemon import short_dir
from companyd.testing.inprocess import InProcessDaemon

TOKEN = "123456789:AAH-actions-test-secret-0123456789abcdef"
FOUNDER = 111


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def write_company(path: Path, bot: BotApiServer | None = None) -> Path:
    doc: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {"name": "Night Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
        "agents": {
            "ceo": {"title": "CEO", "instructions": "You are the ceo."},
            "cfo": {
                "title": "CFO",
                "instructions": "You are the cfo.",
                "reports_to": "ceo",
                "budget": {"daily_usd": 5},
            },
        },
        "dashboard": {"enabled": False},
        "routines": {
            "weekly-numbers": {
                "assignee": "cfo",
                "description": "Sum up this week's numbers.",
                "trigger": {"cron": "0 3 29 2 *"},
            }
        },
    }
    if bot is not None:
        doc["alerts"] = {
            "min_severity": "warning",
            "telegram": {
                "api_url": bot.url,
                "bot_token_env": "TELEGRAM_BOT_TOKEN",
                "chat_ids_env": "TELEGRAM_CHAT_ID",
            },
        }
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def actions(daemon: InProcessDaemon) -> list[tuple[str, str, str, bool]]:
    return [
        (e["data"]["action"], e["data"]["target"], e["data"]["via"], e["data"]["ok"])
        for e in daemon.events("operator_action")
    ]


@pytest.mark.anyio
async def test_cli_actions_that_change_state_are_recorded_via_cli(work: Path) -> None:
    cfg = write_company(work / "company.yaml")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        for argv in (
            ("pause", "cfo"),
            ("resume", "cfo"),
            ("raise-budget", "cfo", "2"),
            ("reload",),
            ("jobs", "run", "weekly-numbers"),
            ("ask", "cfo", "How are the numbers?"),
            ("pause", "nobody"),
        ):
            got = await daemon.cli(*argv)
            assert got.rc == (0 if argv[1:] != ("nobody",) else 1), (argv, got.err)
        assert actions(daemon) == [
            ("pause", "cfo", "cli", True),
            ("resume", "cfo", "cli", True),
            ("raise_budget", "cfo", "cli", True),
            ("reload", "company.yaml", "cli", True),
            ("run_job", "weekly-numbers", "cli", True),
            ("ask", "cfo", "cli", True),
            ("pause", "nobody", "cli", False),
        ]
        paused = daemon.events("operator_action")[0]["data"]
        assert paused["message"].startswith("paused cfo: it finishes its current run")
        ran = daemon.events("operator_action")[4]["data"]
        assert ran["message"].startswith("ran routine weekly-numbers: ok (run-")
        asked = daemon.events("operator_action")[5]["data"]
        assert asked["message"].startswith("ask cfo: ok (run-")
        # asked of a paused agent: nothing ran — recorded not done, and why
        assert (await daemon.cli("pause", "cfo")).rc == 0
        refused = await daemon.cli("ask", "cfo", "Still there?")
        assert refused.rc == 1 and "paused" in refused.err, refused.err
        assert actions(daemon)[-1] == ("ask", "cfo", "cli", False)
        said = daemon.events("operator_action")[-1]["data"]["message"]
        assert said.startswith("ask cfo: cancelled: agent 'cfo' is paused"), said
        assert (await daemon.cli("resume", "cfo")).rc == 0
        # asked in the first instant of a stop (its agents told to drain, the socket still
        # up): nothing is started, the caller is told so with exit 75, recorded not done
        assert daemon.daemon is not None
        daemon.daemon.staff.drain()
        ran = await daemon.cli("jobs", "run", "weekly-numbers")
        asked_now = await daemon.cli("ask", "cfo", "And now?")
        assert (ran.rc, ran.err) == (
            EX_TEMPFAIL,
            "companyd: the daemon is stopping; routine weekly-numbers was not fired — run "
            "`companyd jobs run weekly-numbers` again once the daemon has started\n",
        )
        assert (asked_now.rc, asked_now.err) == (
            EX_TEMPFAIL,
            "companyd: the daemon is stopping; nothing was asked of cfo — ask again once the "
            "daemon has started\n",
        )
        assert actions(daemon)[-2:] == [
            ("run_job", "weekly-numbers", "cli", False),
            ("ask", "cfo", "cli", False),
        ]
        assert len((await daemon.call("job_history", routine="weekly-numbers"))["fires"]) == 1
        await daemon.stop()


def _button(msg: SentMessage, label: str) -> str:
    for row in (msg.reply_markup or {}).get("inline_keyboard") or []:
        for b in row:
            if label in b.get("text", ""):
                return str(b["callback_data"])
    raise AssertionError(f"no {label!r} button on {msg.text!r}")


@pytest.mark.anyio
async def test_telegram_commands_and_buttons_are_recorded_via_telegram(work: Path) -> None:
    async with BotApiServer(token=TOKEN) as bot:
        cfg = write_company(work / "company.yaml", bot)
        env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_CHAT_ID": str(FOUNDER)}
        async with InProcessDaemon(cfg, work / "s", env=env) as daemon:
            daemon.running.bus.publish(
                BudgetThreshold(
                    source="spend",
                    scope="agent",
                    agent="cfo",
                    period="day",
                    key="cfo",
                    level=0.8,
                    used_usd=4.0,
                    limit_usd=5.0,
                    resets_at="2026-01-01T00:00:00Z",
                    message="cfo has used 80% of its daily budget",
                )
            )

            def alert() -> list[SentMessage]:
                return [m for m in bot.messages if "80%" in m.text]

            await bot.wait_for(lambda: bool(alert()), timeout=30)
            msg = alert()[0]
            bot.press_button(FOUNDER, msg.message_id, _button(msg, "Pause cfo"))
            await bot.wait_for(lambda: len(actions(daemon)) >= 1, timeout=30)
            bot.press_button(FOUNDER, msg.message_id, _button(msg, "today"))
            await bot.wait_for(lambda: len(actions(daemon)) >= 2, timeout=30)
            bot.inject_command(FOUNDER, "/resume cfo")
            await bot.wait_for(lambda: len(actions(daemon)) >= 3, timeout=30)
            bot.inject_command(FOUNDER, "/pause nobody")
            await bot.wait_for(lambda: len(actions(daemon)) >= 4, timeout=30)
            bot.inject_command(FOUNDER, "/ask cfo How are the numbers?")
            await bot.wait_for(lambda: len(actions(daemon)) >= 5, timeout=30)
            assert actions(daemon) == [
                ("pause", "cfo", "telegram", True),
                ("raise_budget", "cfo", "telegram", True),
                ("resume", "cfo", "telegram", True),
                ("pause", "nobody", "telegram", False),
                ("ask", "cfo", "telegram", True),
            ]
            # /ask once the stop has begun: nothing is asked, said as what it is (no ⚠️
            # failure) with what to do — as the CLI says it, in the phone's one wording
            assert daemon.daemon is not None
            daemon.daemon.staff.drain()
            bot.inject_command(FOUNDER, "/ask cfo And now?")
            await bot.wait_for(lambda: len(actions(daemon)) >= 6, timeout=30)

            def told() -> list[str]:
                return [m.text for m in bot.messages if "nothing was asked" in m.text]

            await bot.wait_for(lambda: bool(told()), timeout=30)
            assert told() == [
                "⏹ the daemon is stopping; nothing was asked of cfo — ask again once the "
                "daemon has started"
            ]
            assert actions(daemon)[-1] == ("ask", "cfo", "telegram", False)
            await daemon.stop()
