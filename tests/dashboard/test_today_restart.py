"""The Today page after a restart (issue 28): where each result went comes from the run's
durable delivery record (the run journal), not from what the restarted daemon's bus saw —
a result delivered before the restart still says "delivered to telegram at HH:MM" after it.
The daemon is ``companyd run``'s composition root in this process, python-telegram-bot
talks to the Bot API stand-in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.clock import ManualClock
from companyd.testing.bot_api import BotApiServer
from companyd.testing.daemon import short_dir
from companyd.testing.inprocess import InProcessDaemon

from .pagekit import Site

TOKEN = "123456789:AAH-today-test-secret-0123456789abcdef"
FOUNDER = 111


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def _company(path: Path, bot: BotApiServer) -> Path:
    doc: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {"name": "Today Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
        "agents": {"ceo": {"title": "CEO", "instructions": "You are the ceo."}},
        "dashboard": {"enabled": False},
        "alerts": {
            "telegram": {
                "api_url": bot.url,
                "bot_token_env": "TELEGRAM_BOT_TOKEN",
                "chat_ids_env": "TELEGRAM_CHAT_ID",
            }
        },
        "routines": {
            "daily-post": {
                "assignee": "ceo",
                "description": "Draft today's post.",
                "expected_output": "The post.",
                "trigger": {"cron": "0 3 29 2 *"},
            }
        },
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.anyio
async def test_a_result_delivered_before_a_restart_still_says_so_on_today_after_it(
    work: Path,
) -> None:
    async with BotApiServer(token=TOKEN) as bot:
        cfg = _company(work / "company.yaml", bot)
        env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_CHAT_ID": str(FOUNDER)}
        async with InProcessDaemon(cfg, work / "s", env=env) as daemon:
            ran = await daemon.call("run_job", routine="daily-post")
            assert ran["status"] == "ok", ran

            async def delivered() -> dict[str, Any]:
                shown = await daemon.call("run_show", run_id=ran["run_id"])
                done = [d for d in shown["deliveries"] if d["outcome"] == "delivered"]
                return done[0] if done else {}

            async with asyncio.timeout(30):
                while not (record := await delivered()):
                    await asyncio.sleep(0.05)
            assert record["text"].startswith("delivered to telegram at ")
            await daemon.restart()
            # the restarted daemon's bus never saw the delivery
            site = Site(daemon.running, ManualClock(start=daemon.clock.time()))
            async with site.client:
                await site.login()
                page = await site.get("/today")
            await daemon.stop()
    part = page.text.split(f'id="result-{ran["run_id"]}"', 1)[1]
    shown = part.split('aria-label="Where the result went">', 1)[1].split("</ul>", 1)[0]
    assert f'<li class="delivery delivery-delivered">{record["text"]}</li>' in shown, shown
    assert "queued for telegram" not in shown  # the latest record of the channel only
