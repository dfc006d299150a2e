"""Webhooks out, end to end (issue 30): the daemon — in this process, on a manual clock —
sends its events and a routine's results to a receiver on loopback that verifies them with
the standardwebhooks package; a receiver down for 30 s and a daemon restart in the middle
lose and repeat nothing (checked by webhook-id); a receiver that refuses for good is not
retried, and the run's record says so.

The clock starts at the real time: the receiver checks each signature's timestamp against
its own clock (within 5 minutes), as a real one does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.events import RunFailed
from companyd.testing.bot_api import BotApiServer
from companyd.testing.daemon import short_dir
from companyd.testing.inprocess import InProcessDaemon
from companyd.testing.webhook_receiver import Received, WebhookReceiver

from .test_deliver_e2e import OPERATOR, TOKEN, one

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def company(url: str, events: list[str], deliver: list[str]) -> dict[str, Any]:
    """The example company.yaml with one routine (on a cron that does not come round during
    the test), no Telegram, and one webhook ``ops`` at ``url``.
    """
    doc: dict[str, Any] = yaml.safe_load((REPO / "company.yaml").read_text(encoding="utf-8"))
    doc["routines"] = {
        "daily-post": {
            "assignee": "marketing",
            "description": "Draft today's social post about one concrete customer problem.",
            "expected_output": "The text of the post, under 280 characters.",
            "trigger": {"cron": "0 3 29 2 *", "timezone": "UTC"},
            "catch_up": "skip",
            "deliver": deliver,
        }
    }
    doc["dashboard"] = {"enabled": False}
    doc["alerts"] = {
        "webhooks": [
            {"name": "ops", "url": url, "secret_env": "OPS_WEBHOOK_SECRET", "events": events}
        ]
    }
    return doc


def by_type(got: list[Received], type_: str) -> list[Received]:
    return [r for r in got if r.json()["type"] == type_]


async def test_a_receiver_down_30_s_and_a_restart_lose_and_repeat_nothing(work: Path) -> None:
    with WebhookReceiver(SECRET) as rx:
        cfg = work / "company.yaml"
        doc = company(rx.url, ["run.completed", "run.failed"], ["webhook:ops", "file"])
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
        env = {"OPS_WEBHOOK_SECRET": SECRET}
        async with InProcessDaemon(cfg, work / "s", env=env) as daemon:
            clock = daemon.clock
            rx.go_down()
            down_at = clock.monotonic()
            first = await daemon.call("run_job", routine="daily-post")
            assert first["status"] == "ok", first
            await daemon.advance(12)  # two attempts refused
            await daemon.restart()  # in the middle of the outage
            second = await daemon.call("run_job", routine="daily-post")
            assert second["status"] == "ok", second
            await daemon.advance(30 - (clock.monotonic() - down_at))
            assert rx.received() == []  # 30 s down: nothing got through
            rx.come_up()
            await daemon.advance_until(lambda: len(rx.delivered()) >= 2, limit=400)
            await daemon.advance(900)  # room for a duplicate, were there one
            got = rx.received()
            # once each, signed, in the order the runs ended
            assert [r.verified for r in got] == [True, True], [r.problem for r in got]
            assert len({r.id for r in got}) == 2
            bodies = [r.json() for r in got]
            assert [b["type"] for b in bodies] == ["run.completed", "run.completed"]
            assert [b["data"]["run_id"] for b in bodies] == [first["run_id"], second["run_id"]]
            assert all(b["data"]["routine"] == "daily-post" and b["data"]["answer"] for b in bodies)
            assert bodies[0]["timestamp"].endswith("Z")
            # the run's record says where its result went, like telegram's and file's
            text = await daemon.cli("runs", "show", first["run_id"])
            js = await daemon.cli("runs", "show", first["run_id"], "--json")
            assert text.rc == js.rc == 0, (text.err, js.err)
            hooks = [d for d in json.loads(js.out)["deliveries"] if d["to"] == "webhook:ops"]
            assert [d["outcome"] for d in hooks] == ["queued", "delivered"]
            assert hooks[1]["where"] == got[0].id
            assert re.search(
                r"^  delivered to webhook:ops at \d\d:\d\d \(webhook-id msg_[0-9a-f]{32}\)$",
                text.out,
                re.M,
            ), text.out
        log = daemon.log_text()
    assert "Traceback" not in log
    # the outage was said once, not once per attempt
    assert log.count("cannot deliver to webhook ops") <= 2  # once per daemon, at most


async def test_a_permanent_refusal_is_not_retried_and_the_result_is_kept(work: Path) -> None:
    with WebhookReceiver(SECRET) as rx:
        rx.status = 410  # gone: a permanent 4xx
        cfg = work / "company.yaml"
        doc = company(rx.url, ["run.failed"], ["webhook:ops"])
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
        env = {"OPS_WEBHOOK_SECRET": SECRET}
        async with InProcessDaemon(cfg, work / "s", env=env) as daemon:
            run = await daemon.call("run_job", routine="daily-post")
            assert run["status"] == "ok", run
            await daemon.advance_until(lambda: len(rx.received()) >= 1, limit=60)
            await daemon.advance(3600)  # an hour: no retry
            got = rx.received()
            assert [(r.status, r.verified) for r in got] == [(410, True)]
            js = await daemon.cli("runs", "show", run["run_id"], "--json")

            def record() -> list[dict[str, Any]]:
                return [d for d in json.loads(js.out)["deliveries"] if d["to"] == "webhook:ops"]

            assert [d["outcome"] for d in record()] == ["queued", "not_delivered"]
            assert "410" in (record()[1]["reason"] or "")
            assert record()[1]["kept"], record()  # the result is in the founder's inbox
            kinds = [e["kind"] for e in daemon.events()]
            assert kinds.count("result_undelivered") == 1
        log = daemon.log_text()
    # said once: the result's own line (and its alert), not the queue's besides
    assert log.count("410 Gone") == 1, log
    assert "was not delivered to webhook:ops" in log


async def test_a_missing_secret_is_said_once_and_the_events_wait(work: Path) -> None:
    with WebhookReceiver(SECRET) as rx:
        cfg = work / "company.yaml"
        doc = company(rx.url, ["run.completed"], ["file"])
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
        async with InProcessDaemon(cfg, work / "s") as daemon:
            run = await daemon.call("run_job", routine="daily-post")
            assert run["status"] == "ok", run
            await daemon.advance(600)
            assert rx.received() == []
            log = daemon.log_text()
            assert log.count("webhook ops cannot be used: $OPS_WEBHOOK_SECRET is not set") == 1
        # set, and restarted: what waited goes out
        daemon.env["OPS_WEBHOOK_SECRET"] = SECRET
        async with InProcessDaemon(cfg, work / "s", env={"OPS_WEBHOOK_SECRET": SECRET}) as again:
            await again.advance_until(lambda: len(rx.delivered()) >= 1, limit=60)
            (got,) = rx.delivered()
            assert got.json()["type"] == "run.completed"
            assert got.json()["data"]["run_id"] == run["run_id"]


async def test_with_telegram_a_result_reaches_both_the_phone_and_the_webhook(work: Path) -> None:
    # The pager's Telegram mode (the outbox it already opens carries the webhooks' queue):
    # the result goes to both; the webhook also gets the run.failed it subscribes to.
    with WebhookReceiver(SECRET) as rx:
        async with BotApiServer(token=TOKEN) as server:
            cfg = work / "company.yaml"
            doc = company(rx.url, ["run.failed"], ["telegram", "webhook:ops"])
            doc["alerts"]["telegram"] = {
                "api_url": server.url,
                "bot_token_env": "TELEGRAM_BOT_TOKEN",
                "chat_ids_env": "TELEGRAM_CHAT_ID",
            }
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            env = {
                "OPS_WEBHOOK_SECRET": SECRET,
                "TELEGRAM_BOT_TOKEN": TOKEN,
                "TELEGRAM_CHAT_ID": str(OPERATOR),
            }
            async with InProcessDaemon(cfg, work / "s", env=env) as daemon:
                run = await daemon.call("run_job", routine="daily-post")
                assert run["status"] == "ok", run
                await daemon.advance_until(lambda: len(rx.delivered()) >= 1, limit=60)
                await one(server, run["run_id"])
                daemon.running.bus.publish(
                    RunFailed(
                        source="agents/cfo",
                        status="error",
                        reason="the bank API answered 500",
                        agent="cfo",
                        task_id="t-9",
                        run_id="run-9",
                        routine=None,
                        cost_usd=0.0,
                        steps=1,
                        models=[],
                        offline=True,
                    )
                )
                await daemon.advance_until(lambda: len(rx.delivered()) >= 2, limit=60)
                await daemon.advance(600)
            got = [r.json() for r in rx.received()]
            assert [b["type"] for b in got] == ["run.completed", "run.failed"], got
            assert got[0]["data"]["run_id"] == run["run_id"]
            assert got[1]["data"]["reason"] == "the bank API answered 500"
            assert all(r.verified for r in rx.received())


async def test_a_reload_applies_a_webhook_s_new_url_and_events(work: Path) -> None:
    # `companyd reload` answers "applied": the webhook's new URL and events are the ones in
    # force from then on, not the ones read at start (nothing left for a restart to do)
    with WebhookReceiver(SECRET) as old, WebhookReceiver(SECRET) as new:
        cfg = work / "company.yaml"
        cfg.write_text(yaml.safe_dump(company(old.url, ["run.failed"], ["file"]), sort_keys=False))
        env = {"OPS_WEBHOOK_SECRET": SECRET}
        async with InProcessDaemon(cfg, work / "s", env=env) as daemon:
            doc = company(new.url, ["run.completed"], ["file"])
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            answer = await daemon.call("reload")
            assert answer["applied"] is True and "restart_required" not in answer, answer
            run = await daemon.call("run_job", routine="daily-post")
            assert run["status"] == "ok", run
            await daemon.advance_until(lambda: len(new.delivered()) >= 1, limit=120)
            (got,) = new.delivered()
            assert got.verified and got.json()["type"] == "run.completed"
            assert got.json()["data"]["run_id"] == run["run_id"]
            assert old.received() == []
            # a webhook removed by a reload gets nothing more
            doc["alerts"]["webhooks"] = []
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            assert (await daemon.call("reload"))["applied"] is True
            again = await daemon.call("run_job", routine="daily-post")
            assert again["status"] == "ok", again
            await daemon.advance(120)
            assert len(new.received()) == 1
        assert "Traceback" not in daemon.log_text()
