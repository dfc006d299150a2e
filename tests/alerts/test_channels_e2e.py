"""The founder's other channels (issue 30): ``alerts.channels`` through Apprise, end to end.

The daemon in this process on a manual clock (:class:`InProcessDaemon`, the composition root
of ``companyd run``): a crash alert reaches a real SMTP server on loopback (``aiosmtpd``)
through an Apprise ``mailto://`` URL and a JSON endpoint through ``json://``, beside
Telegram (the Bot API stand-in); a routine's result reaches a channel with ``deliver:
true``; a JSON endpoint that is down — across a restart of the daemon — gets the alert once
it is back, exactly once, and a company without Telegram still reaches its channels.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.alerts._channels import SEND_THREADS, AppriseTarget
from companyd.alerts._outbound import OutboundMessage, TransientSendError
from companyd.clock import ManualClock
from companyd.config import ChannelSpec
from companyd.testing.bot_api import BotApiServer
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import DaemonProcess
from companyd.testing.inprocess import InProcessDaemon
from companyd.testing.smtp import SmtpSink, text_of
from companyd.testing.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.anyio

TOKEN = "123456789:AAH-channels-test-secret-0123456789abcdefXYZ"
OPERATOR = 111
SMTP_PASSWORD = "smtp-pass-9f8e7d6c5b4a"
JSON_TOKEN = "json-token-0a1b2c3d4e5f"


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def company(
    channels: list[dict[str, Any]], telegram: str | None = None, **routine: Any
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {"name": "Channel Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
        "agents": {"cfo": {"title": "CFO", "instructions": "Count."}},
        "routines": {
            "daily-post": {
                "assignee": "cfo",
                "description": "Write the day's note.",
                "trigger": {"cron": "0 3 29 2 *"},
                "catch_up": "skip",
                **routine,
            }
        },
        "alerts": {"min_severity": "warning", "channels": channels},
        "dashboard": {"enabled": False},
    }
    if telegram is not None:
        doc["alerts"]["telegram"] = {
            "api_url": telegram,
            "bot_token_env": "TELEGRAM_BOT_TOKEN",
            "chat_ids_env": "TELEGRAM_CHAT_ID",
        }
    return doc


def write(work: Path, doc: dict[str, Any]) -> Path:
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return cfg


async def real_time_until(
    done: Callable[[], bool], timeout: float = 30.0, shown: Callable[[], object] = str
) -> None:
    """Wait (real time: Apprise sends in a thread) until ``done()``; ``shown()`` says what
    there is instead when it does not come.
    """
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not done in time: {shown()}"
        await asyncio.sleep(0.05)


def outbound(state: Path) -> list[tuple[str, str, str, int]]:
    """The channel rows of the outbox: (id, target, state, attempts)."""
    with sqlite3.connect(state / "alerts.sqlite") as db:
        return db.execute(
            "SELECT id, target, state, attempts FROM outbound WHERE kind = 'apprise' ORDER BY seq"
        ).fetchall()


async def test_a_crash_alert_reaches_email_and_a_json_endpoint_beside_telegram(
    work: Path,
) -> None:
    async with BotApiServer(token=TOKEN) as bot:
        await crash_reaches_every_channel(work, bot)


async def crash_reaches_every_channel(work: Path, bot: BotApiServer) -> None:
    with SmtpSink() as smtp, WebhookReceiver("whsec_unused") as rx:
        rx_url = f"json://{rx.host}:{rx.port}/hook?token={JSON_TOKEN}"
        cfg = write(
            work,
            company(
                [
                    {"name": "email", "url_env": "EMAIL_URL"},
                    {"name": "ops", "url_env": "OPS_URL", "deliver": True},
                    {"name": "pager", "url_env": "PAGER_URL", "min_severity": "critical"},
                ],
                telegram=bot.url,
                deliver=["telegram"],
            ),
        )
        env = {
            "COMPANYD_DEBUG": "1",
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_CHAT_ID": str(OPERATOR),
            "EMAIL_URL": smtp.url(SMTP_PASSWORD),
            "OPS_URL": rx_url,
            "PAGER_URL": rx_url.replace("/hook", "/pager"),
        }
        clock = ManualClock(time.time())
        async with InProcessDaemon(cfg, work / "s", clock=clock, env=env) as d:
            await bot.wait_for(lambda: any("started" in m.text for m in bot.messages), 30)
            assert (await d.call("debug", action="crash", target="cfo"))["crashed"]
            await real_time_until(lambda: len(smtp.messages) >= 1 and len(rx.requests) >= 1)
            await bot.wait_for(lambda: any("cfo" in m.text for m in bot.messages), 30)

            [mail] = smtp.messages
            assert smtp.logins == [("founder", SMTP_PASSWORD)]
            assert smtp.envelopes == [("companyd@example.com", ["founder@example.com"])]
            assert str(mail["Subject"]) == "🟠 cfo crashed and was restarted"  # Telegram's title
            assert "Channel Co" in text_of(mail)
            [hook] = rx.requests
            assert hook.path.startswith("/hook")
            sent = hook.json()
            assert sent["title"] == "🟠 cfo crashed and was restarted"
            assert sent["type"] == "warning"
            assert "Channel Co" in sent["message"]

            # a routine's result for the founder reaches the channel with deliver: true only
            fired = await d.call("run_job", routine="daily-post")
            assert fired["status"] == "ok", fired
            await real_time_until(lambda: len(rx.requests) >= 2)
            result = rx.requests[1].json()
            assert result["title"] == "📝 daily-post — cfo" and result["type"] == "success"
            assert fired["run_id"] in result["message"]
            # the run's record says where its result went, as for telegram's and file's
            shown = await d.cli("runs", "show", fired["run_id"], "--json")
            to_ops = [x for x in json.loads(shown.out)["deliveries"] if x["to"] == "channel:ops"]
            assert [x["outcome"] for x in to_ops] == ["delivered"], shown.out
            text = await d.cli("runs", "show", fired["run_id"])
            assert re.search(r"^  delivered to channel:ops at \d\d:\d\d$", text.out, re.M), text.out
            await d.advance(60)
            await asyncio.sleep(0.5)
            assert len(smtp.messages) == 1  # email: min_severity warning, no deliver
            # pager: critical only; the crash was a warning
            assert [r.path.split("?")[0] for r in rx.requests] == ["/hook", "/hook"]
            assert {row[2] for row in outbound(work / "s")} == {"sent"}
            logged = d.log_text()
        assert SMTP_PASSWORD not in logged and JSON_TOKEN not in logged


async def test_a_channel_that_is_down_gets_the_alert_once_it_is_back_across_a_restart(
    work: Path,
) -> None:
    # no Telegram at all: the channels are this company's only way to the founder
    with WebhookReceiver("whsec_unused") as rx:
        cfg = write(work, company([{"name": "ops", "url_env": "OPS_URL"}]))
        env = {"COMPANYD_DEBUG": "1", "OPS_URL": f"json://{rx.host}:{rx.port}/hook"}
        rx.go_down()
        clock = ManualClock(time.time())
        async with InProcessDaemon(cfg, work / "s", clock=clock, env=env) as d:
            assert (await d.call("debug", action="crash", target="cfo"))["crashed"]
            await real_time_until(lambda: any(r[3] >= 1 for r in outbound(work / "s")))
            for _ in range(3):  # three more attempts, on the backoff
                await d.advance(60)
                await asyncio.sleep(0.3)
            [(row_id, target, state, attempts)] = outbound(work / "s")
            assert (target, state) == ("channel:ops", "pending") and attempts >= 2
            assert "cannot deliver to apprise channel:ops" in d.log_text()
            # status says the channel is failing, since when and why — never its URL
            [ops] = (await d.call("status"))["alerts"]["channels"]
            assert (ops["name"], ops["state"]) == ("ops", "failing"), ops
            assert "json send failed" in ops["error"] and ops["since"] is not None
            shown = await d.cli("status")
            assert re.search(r"^Channels: ops failing since \d\d:\d\d \(json", shown.out, re.M)
            assert str(rx.port) not in shown.out
            await d.restart()
            rx.come_up()
            await d.advance(400)
            await real_time_until(lambda: len(rx.requests) >= 1)
            await d.advance(400)
            await asyncio.sleep(0.5)
            assert len(rx.requests) == 1  # once: not lost, not repeated
            assert "cfo" in rx.requests[0].json()["title"]
            [(same_id, _, state, _)] = outbound(work / "s")
            assert (same_id, state) == (row_id, "sent")
            [ops] = (await d.call("status"))["alerts"]["channels"]
            assert (ops["state"], ops["since"], ops["error"]) == ("ok", None, "")


@contextlib.asynccontextmanager
async def trickling_endpoint() -> AsyncIterator[tuple[int, list[float]]]:
    """An HTTP endpoint that never answers: it takes the request, then sends one byte of a
    status line every 0.5 s forever — Apprise's read timeout never fires. Yields its port
    and the times connections came in.
    """
    came: list[float] = []
    handlers: set[asyncio.Task[Any]] = set()

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        came.append(time.monotonic())
        handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            for _ in range(600):  # 5 minutes at most: every wait has a deadline
                writer.write(b"H")
                await writer.drain()
                await asyncio.sleep(0.5)
        except OSError:
            pass  # the sender hung up
        finally:
            writer.close()

    server = await asyncio.start_server(trickle, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1]), came
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


async def test_a_channel_whose_sends_stay_stuck_holds_up_only_itself() -> None:
    """An endpoint that never finishes its answer keeps its sends' threads (Apprise blocks);
    once SEND_THREADS of them are stuck, that channel's next send fails at once (retried
    later) — and another channel's alert still goes out: the stuck ones are counted per
    channel, not for all channels together.
    """

    def alert(title: str) -> OutboundMessage:
        data = {"title": title, "body": "b", "severity": "warning"}
        return OutboundMessage(
            id="m", target="channel:x", type="alert", timestamp=0.0, data=data, body="", attempt=1
        )

    async with trickling_endpoint() as (port, came):
        spec = ChannelSpec(name="stuck", url_env="STUCK_URL")
        stuck = AppriseTarget(spec, f"json://127.0.0.1:{port}/hook", deadline=0.3)
        for _ in range(SEND_THREADS):
            with pytest.raises(TransientSendError, match=r"did not answer within 0\.3 s"):
                await stuck.send(alert("stuck"))
        # each is still in the endpoint (under load a thread may connect only after its
        # send's deadline: it is stuck either way)
        await real_time_until(lambda: len(came) == SEND_THREADS)
        with pytest.raises(TransientSendError, match="still stuck"):
            await stuck.send(alert("stuck"))
        with WebhookReceiver("whsec_unused") as rx:
            ops = ChannelSpec(name="ops", url_env="OPS_URL")
            url = f"json://{rx.host}:{rx.port}/hook?token={JSON_TOKEN}"
            await AppriseTarget(ops, url, deadline=10.0).send(alert("fine"))
            assert [r.json()["title"] for r in rx.requests] == ["fine"]
        # no thread more was started for the refused send (it would have connected by the
        # time the other channel's send went and came back)
        assert len(came) == SEND_THREADS


async def test_sigterm_stops_the_daemon_in_time_while_a_channel_endpoint_never_answers(
    work: Path,
) -> None:
    # a channel whose endpoint never answers holds an Apprise send (blocking, in a thread)
    # for ever: the daemon must still exit on SIGTERM, well within systemd's stop timeout
    async with trickling_endpoint() as (port, came):
        cfg = write(work, company([{"name": "ops", "url_env": "OPS_URL"}]))
        env = {**os.environ, "COMPANYD_DEBUG": "1", "OPS_URL": f"json://127.0.0.1:{port}/hook"}
        d = DaemonProcess(cfg, work / "s", log=work / "daemon.log", env=env, forked=True)
        async with d:
            assert (await d.call("debug", action="crash", target="cfo"))["crashed"]
            await real_time_until(lambda: bool(came))  # the send is stuck in the endpoint
            d.send_signal(signal.SIGTERM)
            started = time.monotonic()
            assert await d.wait(30) == 0, d.log_text()[-3000:]
            assert time.monotonic() - started < 30
        # the alert stays owed: the next start sends it
        [(_, target, state, _)] = outbound(work / "s")
        assert (target, state) == ("channel:ops", "pending")


async def test_a_channel_added_by_a_reload_gets_the_next_alert_without_a_restart(
    work: Path,
) -> None:
    # no Telegram, no webhook, no channel at start (no outbox open): the reload that adds a
    # channel answers "applied", and the next alert reaches the channel then, not after a
    # restart
    with WebhookReceiver("whsec_unused") as rx:
        cfg = write(work, company([]))
        env = {"COMPANYD_DEBUG": "1", "OPS_URL": f"json://{rx.host}:{rx.port}/hook"}
        clock = ManualClock(time.time())
        async with InProcessDaemon(cfg, work / "s", clock=clock, env=env) as d:
            write(work, company([{"name": "ops", "url_env": "OPS_URL"}]))
            answer = await d.call("reload")
            assert answer["applied"] is True and "restart_required" not in answer, answer
            assert (await d.call("debug", action="crash", target="cfo"))["crashed"]
            await real_time_until(lambda: len(rx.requests) >= 1)
            assert "cfo" in rx.requests[0].json()["title"]
            [ops] = (await d.call("status"))["alerts"]["channels"]
            assert (ops["name"], ops["state"]) == ("ops", "ok"), ops
            # and one whose floor a reload raises gets no more warnings
            write(
                work, company([{"name": "ops", "url_env": "OPS_URL", "min_severity": "critical"}])
            )
            assert (await d.call("reload"))["applied"] is True
            await d.advance(700)  # past the coalescing window
            assert (await d.call("debug", action="crash", target="cfo"))["crashed"]
            await d.advance(60)
            await asyncio.sleep(0.5)
            assert len(rx.requests) == 1
        assert "Traceback" not in d.log_text()


async def test_the_messages_of_a_removed_channel_are_forgotten_those_of_the_others_kept(
    work: Path,
) -> None:
    # both channels down: each owes the crash alert, and `ops` (deliver: true) a result too
    with WebhookReceiver("whsec_unused") as rx:
        url = f"json://{rx.host}:{rx.port}"
        both: list[dict[str, Any]] = [
            {"name": "ops", "url_env": "OPS_URL", "deliver": True},
            {"name": "team", "url_env": "TEAM_URL"},
            {"name": "night", "url_env": "NIGHT_URL"},
        ]
        cfg = write(work, company(both, deliver=["telegram"]))
        env = {
            "COMPANYD_DEBUG": "1",
            "OPS_URL": f"{url}/ops",
            "TEAM_URL": f"{url}/team",
            "NIGHT_URL": f"{url}/night",
        }
        rx.go_down()
        clock = ManualClock(time.time())

        def owed() -> list[tuple[str, str, str]]:
            """The crash alert's and the result's rows: (target, what, state)."""
            with sqlite3.connect(work / "s" / "alerts.sqlite") as db:
                rows = db.execute("SELECT target, key, state FROM outbound ORDER BY seq")
                return sorted(
                    (t, k.split("|")[0].split("-")[0], st)
                    for t, k, st in rows
                    if k.startswith(("alert:crash|", "result:"))
                )

        async with InProcessDaemon(cfg, work / "s", clock=clock, env=env) as d:
            assert (await d.call("debug", action="crash", target="cfo"))["crashed"]
            fired = await d.call("run_job", routine="daily-post")
            assert fired["status"] == "ok", fired
            await real_time_until(lambda: len(owed()) == 4, shown=owed)
            # a reload removes `ops`: its alert is forgotten, its result recorded as not
            # delivered (and kept in the inbox); what `team` and `night` owe stays
            write(work, company(both[1:], deliver=["telegram"]))
            assert (await d.call("reload"))["applied"] is True
            gone = [
                ("channel:night", "alert:crash", "pending"),
                ("channel:ops", "result:run", "failed"),
                ("channel:team", "alert:crash", "pending"),
            ]
            await real_time_until(lambda: owed() == gone, shown=owed)
            # the run's record is written right after the row (on_done): read until it is
            deadline = time.monotonic() + 30
            while True:
                shown = await d.cli("runs", "show", fired["run_id"], "--json")
                deliveries = json.loads(shown.out)["deliveries"]
                to_ops = [x for x in deliveries if x["to"] == "channel:ops"]
                if to_ops or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert [x["outcome"] for x in to_ops] == ["not_delivered"], shown.out
            assert "no longer in alerts.channels" in (to_ops[0]["reason"] or ""), to_ops
            assert to_ops[0]["kept"], to_ops
            assert "message(s) for channel:ops forgotten: no longer in alerts.channels" in (
                d.log_text()
            )
        # removed while the daemon was stopped: forgotten when it starts
        write(work, company(both[1:2], deliver=["telegram"]))
        async with InProcessDaemon(cfg, work / "s", clock=clock, env=env) as d:
            await real_time_until(
                lambda: (
                    owed()
                    == [
                        ("channel:ops", "result:run", "failed"),
                        ("channel:team", "alert:crash", "pending"),
                    ]
                ),
                shown=owed,
            )
            assert not [r for r in outbound(work / "s") if r[1] == "channel:night"]
            rx.come_up()
            await d.advance(400)
            await real_time_until(lambda: any(r.path == "/team" for r in rx.requests))
            await d.advance(400)
            await asyncio.sleep(0.5)
            # what team owed, each once; nothing for the removed channels
            paths = [r.path for r in rx.requests]
            titles = [r.json()["title"] for r in rx.requests]
            assert set(paths) == {"/team"} and len(titles) == len(set(titles)), titles
            assert "🟠 cfo crashed and was restarted" in titles
        assert "Traceback" not in d.log_text()


async def test_quiet_hours_hold_a_channel_s_alerts_to_the_window_s_end(work: Path) -> None:
    # 01:00–03:00 UTC is quiet; it is 02:00: a crash (a warning) waits until 03:00, and
    # then reaches the channel once
    with WebhookReceiver("whsec_unused") as rx:
        doc = company([{"name": "ops", "url_env": "OPS_URL"}])
        doc["alerts"]["quiet_hours"] = {"start": "01:00", "end": "03:00", "timezone": "UTC"}
        cfg = write(work, doc)
        env = {"COMPANYD_DEBUG": "1", "OPS_URL": f"json://{rx.host}:{rx.port}/hook"}
        today = datetime.now(UTC).date()
        night = datetime(today.year, today.month, today.day, 2, 0, tzinfo=UTC).timestamp()
        clock = ManualClock(night)
        async with InProcessDaemon(cfg, work / "s", clock=clock, env=env) as d:
            assert (await d.call("debug", action="crash", target="cfo"))["crashed"]
            await real_time_until(lambda: len(outbound(work / "s")) >= 1)
            await d.advance(1800)
            await asyncio.sleep(1.0)
            assert rx.requests == []  # 02:30: still quiet
            await d.advance(1800)  # 03:00
            await real_time_until(lambda: len(rx.requests) >= 1)
            await d.advance(600)
            await asyncio.sleep(0.5)
            [got] = rx.requests
            assert got.json()["title"] == "🟠 cfo crashed and was restarted"
        assert "Traceback" not in d.log_text()
