"""Results reach the founder, and the founder answers back (issue 17), end to end.

The daemon with the real anthropic SDK talking to the Messages API stand-in and
python-telegram-bot talking to the Bot API stand-in: the daily post is delivered as a
message naming the routine, the agent, the cost and the run id; a Telegram reply to it is a
follow-up task to the same agent that sees the task, its result and the reply, answered as a
reply in the thread; a restart resends nothing; a 60 s Telegram outage loses nothing (once
more with three results waiting and a restart in the middle); a result longer than three
messages arrives as one ``.md`` document; a result in quiet hours waits for their end while
a critical alert goes through; the digest arrives at ``alerts.digest_at`` with one line per
result.

Where time must pass (the digest, quiet hours, the long outage) the daemon runs in this
process on a manual clock (:class:`~companyd.testing.inprocess.InProcessDaemon`, the same
composition root as ``companyd run``), so the test can stand one second before the moment
and see that nothing went yet; the other tests use it too (nothing in them is about a
process). Where a real process matters (SIGTERM or kill -9 while a follow-up's model call is
in flight) the daemon that is signalled is a real ``companyd run`` process (forked from
:mod:`companyd.testing.forkserver`: its start-up imports are not the point); the one that
comes back after it reads what that process left, in this process.
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
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.alerts._values import run_cost, usd
from companyd.clock import ManualClock
from companyd.testing.bot_api import BotApiServer, SentMessage
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import DaemonProcess
from companyd.testing.inprocess import InProcessDaemon
from companyd.testing.messages_api import MessagesAPIServer, fault, reply_text, stall

REPO = Path(__file__).resolve().parents[2]
TOKEN = "123456789:AAH-e2e-test-secret-0123456789abcdefXYZ"
OPERATOR = 111
POST = (
    "Invoices chase themselves now: Northwind reminds your late payers politely, "
    "three times, then tells you who still owes."
)
SHORTER = "Late invoices? Northwind chases them for you — politely, three times."
OUTAGE_POST = "Month-end close in an afternoon, not a weekend: Northwind matches the bank feed."
#: A month-end report of about 15,000 characters: more than three messages' worth.
REPORT = "Month-end close, November: every invoice matched.\n\n" + "\n".join(
    f"{i}. Invoice NW-{i:04d} from Northwind Traders matches bank line {1000 + i}."
    for i in range(1, 220)
)


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def company(
    api_url: str,
    routines: dict[str, Any],
    digest_at: str = "08:00",
    quiet_hours: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The example company.yaml with only ``routines`` (none fires on its own while the
    test runs) and its Telegram section pointed at the stand-in (no quiet hours unless
    given).
    """
    doc: dict[str, Any] = yaml.safe_load((REPO / "company.yaml").read_text(encoding="utf-8"))
    doc["routines"] = routines
    doc["alerts"] = {
        "min_severity": "warning",
        "digest_at": digest_at,
        "telegram": {
            "api_url": api_url,
            "bot_token_env": "TELEGRAM_BOT_TOKEN",
            "chat_ids_env": "TELEGRAM_CHAT_ID",
        },
    }
    if quiet_hours is not None:
        doc["alerts"]["quiet_hours"] = quiet_hours
    return doc


def daily_post(**extra: Any) -> dict[str, Any]:
    """daily-post as in the example, on a cron that does not come round during the test."""
    return {
        "assignee": "marketing",
        "description": "Draft today's social post about one concrete customer problem we solve.",
        "expected_output": "The text of the post, under 280 characters.",
        "trigger": {"cron": "0 3 29 2 *", "timezone": "UTC"},
        "catch_up": "skip",
        **extra,
    }


def env_for(server: BotApiServer, llm: MessagesAPIServer, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_CHAT_ID": str(OPERATOR),
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": llm.base_url,
        **more,
    }


def env_vars(server: BotApiServer, llm: MessagesAPIServer) -> dict[str, str]:
    """What an in-process daemon adds to the environment (see :func:`env_for`)."""
    return {
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_CHAT_ID": str(OPERATOR),
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": llm.base_url,
    }


def to_operator(server: BotApiServer, needle: str) -> list[SentMessage]:
    return [m for m in server.messages if m.chat_id == OPERATOR and needle in m.text]


async def one(
    server: BotApiServer, needle: str, skip: int = 0, timeout: float = 60.0
) -> SentMessage:
    await server.wait_for(lambda: len(to_operator(server, needle)) > skip, timeout=timeout)
    return to_operator(server, needle)[skip]


async def linked(state: Path, message_id: int) -> None:
    """Wait until the pager has recorded which run message ``message_id`` shows: the
    stand-in records a message before the daemon has Telegram's answer, and a founder's
    reply can only follow a message the daemon knows it sent.
    """
    db = state / "alerts.sqlite"
    async with asyncio.timeout(30):
        while True:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
                row = c.execute(
                    "SELECT run_id FROM threads WHERE chat_id = ? AND message_id = ?",
                    (OPERATOR, message_id),
                ).fetchone()
            if row is not None:
                return
            await asyncio.sleep(0.05)


def to_memory(event: dict[str, Any]) -> bool:
    """A ``result_delivered`` event of a delivery to the company memory."""
    return bool(event["data"].get("to") == "memory")


def _thread_links(state: Path) -> set[int]:
    """The message ids the pager links to runs."""
    db = state / "alerts.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
        return {int(r[0]) for r in c.execute("SELECT message_id FROM threads")}


def prompt_text(body: Any) -> str:
    """Everything the agent was shown in one Messages API request (user turns)."""
    out = []
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, str):
            out.append(content)
        else:
            out += [str(b.get("text", "")) for b in content or [] if isinstance(b, dict)]
    return "\n".join(out)


def normal(text: str) -> str:
    """Costs and run ids vary from run to run."""
    return re.sub(r"run-[0-9a-f]{12}", "run-…", re.sub(r"\$\d+\.\d{4}", "$…", text))


def readme_tour_is_true(post: str, answer: str) -> None:
    """The README tour's delivered post and reply are what the founder really gets: each
    line of the sample (but the founder's own ↪ line) is a line of the real messages.
    """
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index("**The company's work, on the founder's phone.**")
    begin = readme.index("```text\n", start) + 8
    block = readme[begin : readme.index("\n```", begin)]
    real = {normal(line) for line in (post + "\n" + answer).splitlines()}
    sample = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("↪")]
    assert len(sample) >= 6
    assert [ln for ln in sample if normal(ln) not in real] == []


async def the_thread_shows_in_runs_show(
    daemon: DaemonProcess | InProcessDaemon, delivered: str
) -> None:
    """``companyd runs show`` (text and --json) links the delivered run and its follow-ups:
    the Telegram reply's run follows the delivered one, its own reply follows it, and the
    delivered run lists the Telegram follow-up and the ``ask --reply-to`` one as next.
    """
    runs = (await daemon.call("runs", agent="marketing", limit=10))["runs"]
    by_answer = {r["answer"]: r["run_id"] for r in runs}
    reply, done = by_answer[SHORTER], by_answer["Done: the short one goes out at 14:00."]
    shell = by_answer["A third take: invoices that chase themselves."]

    async def show(run: str) -> tuple[str, dict[str, Any]]:
        text = await daemon.cli("runs", "show", run)
        js = await daemon.cli("runs", "show", run, "--json")
        assert text.rc == js.rc == 0, (text.err, js.err)
        return text.out, json.loads(js.out)

    text, t = await show(reply)
    assert t["thread"]["reply_to"]["run_id"] == delivered
    assert [r["run_id"] for r in t["thread"]["replies"]] == [done]
    assert "Shorter please, and keep the invoices." in t["task"]["prompt"]
    assert t["answer"] == SHORTER
    assert f"follows:  marketing's run {delivered} (ok)" in text.splitlines()
    assert f"followed: marketing's run {done} (ok)" in text.splitlines()

    text, t = await show(delivered)
    assert t["thread"]["reply_to"] is None
    assert t["routine"] == "daily-post"
    assert t["asked_by"]["kind"] == "routine"
    assert [r["run_id"] for r in t["thread"]["replies"]] == [reply, shell]
    assert t["answer"] == POST
    lines = text.splitlines()
    assert "asked by: routine daily-post" in lines
    assert [ln for ln in lines if ln.startswith("followed: ")] == [
        f"followed: marketing's run {reply} (ok)",
        f"followed: marketing's run {shell} (ok)",
    ]
    assert not any(ln.startswith("follows: ") for ln in lines)

    text, t = await show(shell)
    assert t["thread"]["reply_to"]["run_id"] == delivered
    assert t["asked_by"]["kind"] == "founder"
    assert f"follows:  marketing's run {delivered} (ok)" in text.splitlines()


async def the_delivery_shows_in_runs_show(
    daemon: InProcessDaemon, run_id: str, message: int
) -> None:
    """The run's record says where its result went (issue 28): delivered to Telegram, when
    and as which message — in ``runs show`` and its ``--json``.
    """
    text = await daemon.cli("runs", "show", run_id)
    js = await daemon.cli("runs", "show", run_id, "--json")
    assert text.rc == js.rc == 0, (text.err, js.err)
    sent = [d for d in json.loads(js.out)["deliveries"] if d["outcome"] == "delivered"]
    assert [(d["to"], d["message_id"]) for d in sent] == [("telegram", message)]
    assert re.search(
        rf"^delivered:\n  delivered to telegram at \d\d:\d\d \(message {message}\)$",
        text.out,
        re.M,
    ), text.out


@pytest.mark.anyio
async def test_a_delivered_post_a_reply_in_its_thread_a_restart_and_an_outage(
    work: Path,
) -> None:
    clock = ManualClock()
    async with BotApiServer(token=TOKEN) as server:
        with MessagesAPIServer() as llm:
            cfg = work / "company.yaml"
            doc = company(server.url, {"daily-post": daily_post()})
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            env = env_vars(server, llm)
            async with InProcessDaemon(
                cfg, work / "s", clock=clock, env=env, offline=False
            ) as daemon:
                await one(server, "companyd started")

                # the routine runs; its result reaches the founder, naming routine, agent,
                # cost and run
                llm.enqueue(reply_text(POST))
                fired = await daemon.call("run_job", routine="daily-post")
                assert fired["status"] == "ok", fired
                run_id = fired["run_id"]
                post = await one(server, POST)
                lines = post.text.splitlines()
                assert lines[0] == "📝 daily-post — marketing"
                assert lines[2] == POST
                assert lines[-1] == (
                    f"— {run_cost(fired['cost_usd'])} · {run_id} · reply to follow up"
                )
                assert not post.disable_notification  # a result rings

                # the founder replies to it: a follow-up to marketing, in the same thread
                llm.enqueue(reply_text(SHORTER))
                await linked(work / "s", post.message_id)
                _, reply_id = server.inject_reply(
                    OPERATOR, post.message_id, "Shorter please, and keep the invoices."
                )
                answer = await one(server, SHORTER)
                assert answer.reply_to == reply_id
                assert answer.text.splitlines()[0] == "💬 marketing"
                shown = prompt_text(llm.requests[-1].body)
                assert "Draft today's social post" in shown  # the original task
                assert POST in shown  # its result
                assert "Shorter please, and keep the invoices." in shown  # the reply
                runs = (await daemon.call("runs", agent="marketing", limit=5))["runs"]
                assert [r["status"] for r in runs[:2]] == ["ok", "ok"]

                # a reply to the answer goes on in the thread
                llm.enqueue(reply_text("Done: the short one goes out at 14:00."))
                await linked(work / "s", answer.message_id)
                _, again = server.inject_reply(OPERATOR, answer.message_id, "Good. Ship it.")
                last = await one(server, "Done: the short one goes out")
                assert last.reply_to == again
                assert SHORTER in prompt_text(llm.requests[-1].body)
                readme_tour_is_true(post.text, answer.text)

                # the same thread from the shell: companyd ask --reply-to, over the socket
                llm.enqueue(reply_text("A third take: invoices that chase themselves."))
                shell = await daemon.cli(
                    "ask", "marketing", "--reply-to", run_id, "One more take?", timeout=120
                )
                assert shell.rc == 0, shell.err
                assert shell.out.startswith("A third take: invoices that chase themselves.")
                assert POST in prompt_text(llm.requests[-1].body)
                refused = await daemon.cli("ask", "cfo", "--reply-to", run_id, "Hm?", timeout=120)
                assert refused.rc != 0
                assert f"run {run_id!r} is marketing's, not cfo's" in refused.err
                assert "Traceback" not in refused.err
                print(f"\n{post.text}\n\n{answer.text}\n")  # for the README, when it changes
                await the_thread_shows_in_runs_show(daemon, run_id)

                # a graceful restart (systemctl restart) is told as planned, in a message of
                # its own — not folded into the first as "started 2 times — restart loop?"
                # (an alert's story edited across a restart: tests/alerts/test_alerts.py,
                # test_restart_sends_what_waited_and_never_resends_what_was_delivered)
                started = (await one(server, "companyd started")).message_id
                await daemon.restart()
                await daemon.advance_until(
                    lambda: bool(to_operator(server, "companyd restarted (planned)")), limit=60
                )
                assert not server.find_message(OPERATOR, started).edits  # type: ignore[union-attr]

                # a 60 s outage (on the daemon's clock) loses nothing
                await server.go_down("refuse")
                llm.enqueue(reply_text(OUTAGE_POST))
                during = await daemon.call("run_job", routine="daily-post")
                assert during["status"] == "ok", during
                await daemon.advance(60.0)
                assert to_operator(server, OUTAGE_POST) == []
                await server.go_up()
                await daemon.advance_until(lambda: bool(to_operator(server, OUTAGE_POST)), limit=60)
                late = to_operator(server, OUTAGE_POST)[0]
                assert during["run_id"] in late.text
                await daemon.advance(30)  # room for a duplicate, were there one
                await asyncio.sleep(0.5)
                assert len(to_operator(server, OUTAGE_POST)) == 1
                # ... and nothing was sent twice across the restart: the sender goes
                # oldest first, so anything resent would have come before this one
                assert len(to_operator(server, POST)) == 1
                assert len(to_operator(server, SHORTER)) == 1
                # (after the timed part: two more commands must not stretch its windows)
                await the_delivery_shows_in_runs_show(daemon, run_id, post.message_id)
    assert "Traceback" not in daemon.log_text()


@pytest.mark.anyio
async def test_a_reply_to_a_result_naming_a_desk_id_is_a_follow_up_to_that_result(
    work: Path,
) -> None:
    """Issue 32 item 7: a result whose text holds something that looks like a desk id
    (``q-0123456789``: the agent's content, not companyd's) does not hijack the founder's
    reply — it is a follow-up to that result; only companyd's own lines name a desk item.
    """
    hijack = "Reminder: answer q-0123456789 and r-abcdef0123 before Friday."
    async with BotApiServer(token=TOKEN) as server:
        with MessagesAPIServer() as llm:
            cfg = work / "company.yaml"
            doc = company(server.url, {"daily-post": daily_post()})
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            env = env_vars(server, llm)
            async with InProcessDaemon(cfg, work / "s", env=env, offline=False) as daemon:
                await one(server, "companyd started")
                llm.enqueue(reply_text(hijack))
                fired = await daemon.call("run_job", routine="daily-post")
                assert fired["status"] == "ok", fired
                post = await one(server, hijack)
                await linked(work / "s", post.message_id)
                llm.enqueue(reply_text(SHORTER))
                _, reply_id = server.inject_reply(OPERATOR, post.message_id, "Shorter please.")
                answer = await one(server, SHORTER)
                assert answer.reply_to == reply_id
                assert hijack in prompt_text(llm.requests[-1].body)  # the result it follows
                assert "Shorter please." in prompt_text(llm.requests[-1].body)
                assert to_operator(server, "0123456789")[1:] == []  # no "no such item" reply
    assert "Traceback" not in daemon.log_text()


@pytest.mark.anyio
async def test_the_digest_arrives_at_its_time_with_one_line_per_result(work: Path) -> None:
    # the daemon's day starts at 07:45 UTC; the digest is due at 08:00, 900 s later on its
    # manual clock, which stands still while the daemon starts and runs
    sim0 = datetime(2026, 11, 27, 7, 45, tzinfo=UTC).timestamp()
    clock = ManualClock(sim0)
    routines = {
        "daily-post": daily_post(deliver=["digest"]),
        "weekly-spend-review": {
            "assignee": "cfo",
            "description": "Review last week's LLM spend per agent and routine.",
            "trigger": {"cron": "0 3 29 2 *"},
            "deliver": ["digest", "file", "memory"],
        },
    }
    async with BotApiServer(token=TOKEN) as server:
        with MessagesAPIServer() as llm:
            cfg = work / "company.yaml"
            cfg.write_text(yaml.safe_dump(company(server.url, routines), sort_keys=False))
            env = env_vars(server, llm)
            async with InProcessDaemon(
                cfg, work / "s", clock=clock, env=env, offline=False
            ) as daemon:
                await one(server, "companyd started")
                llm.enqueue(reply_text(POST))
                first = await daemon.call("run_job", routine="daily-post")
                llm.enqueue(reply_text("Spend was flat: $0.41 for the week, no outliers."))
                second = await daemon.call("run_job", routine="weekly-spend-review")
                assert first["status"] == second["status"] == "ok"
                assert clock.time() < sim0 + 900, "the runs took past the digest time"
                assert to_operator(server, POST) == []  # no message: it waits for the digest
                # the file and memory deliveries are made from the pager's intake, not the
                # outbox: wait for them before the restart (a stop in the middle of one is
                # not retried — the scaled-clock version of this test never stopped that
                # early)
                async with asyncio.timeout(60):
                    while {e["data"]["to"] for e in daemon.events("result_delivered")} != {
                        "file",
                        "memory",
                    }:
                        await asyncio.sleep(0.05)
                # the items wait in the outbox: a restart before the digest keeps them
                await daemon.restart()

                # one second before 08:00: no digest yet
                await daemon.advance(sim0 + 899 - clock.time())
                await asyncio.sleep(0.5)
                assert to_operator(server, "📰") == []
                await daemon.advance_until(lambda: bool(to_operator(server, "📰")), limit=120)
                digest = to_operator(server, "📰")[0]
                assert clock.time() >= sim0 + 900
                lines = digest.text.splitlines()
                total = first["cost_usd"] + second["cost_usd"]
                assert lines[0] == f"📰 Today's work: 2 results, {usd(total)}"
                assert lines[2].startswith(
                    f"1. daily-post (marketing, {run_cost(first['cost_usd'])}): Invoices chase"
                )
                assert lines[3] == (
                    f"2. weekly-spend-review (cfo, {run_cost(second['cost_usd'])}): "
                    "Spend was flat: $0.41 for the week, no outliers."
                )
                # where else it went, from the run's record across the restart (issue 28)
                day = datetime.fromtimestamp(sim0, UTC).date().isoformat()
                assert lines[4] == (
                    f"   → written to outputs/weekly-spend-review/{day}-{second['run_id']}.md"
                    " · added to the company memory"
                )
                assert [label for label, _ in digest.buttons()] == ["📄 1", "📄 2"]
                await daemon.advance(60)  # room for a second digest, were there one
                await asyncio.sleep(0.5)
                assert len(to_operator(server, "📰")) == 1

                # a button sends that result whole, as a reply to the digest
                _, data = digest.buttons()[0]
                server.press_button(OPERATOR, digest.message_id, data)
                whole = await one(server, f"📝 daily-post — marketing\n\n{POST}")
                assert whole.reply_to == digest.message_id

                # the file delivery, in the company's time zone
                day = datetime.fromtimestamp(sim0, UTC).date().isoformat()
                path = (
                    work / "s" / "outputs" / "weekly-spend-review" / f"{day}-{second['run_id']}.md"
                )
                assert "Spend was flat" in path.read_text(encoding="utf-8")
                told = daemon.events("result_delivered", to_memory)
                assert [e["data"]["where"] for e in told] == ["routine:weekly-spend-review"]
                # the run's record says where each went (issue 28)
                shown = await daemon.cli("runs", "show", second["run_id"], "--json")
                assert shown.rc == 0, shown.err
                said = [d["text"] for d in json.loads(shown.out)["deliveries"]]
                rel = f"outputs/weekly-spend-review/{day}-{second['run_id']}.md"
                assert said[0].startswith("queued for the digest of ")
                assert said[1:] == [
                    f"written to {rel}",
                    "added to the company memory (routine:weekly-spend-review)",
                ], said
    # ... an observation on the routine's entity, in the memory file the daemon leaves when
    # it stops (while it runs, the file is folded from the memory's journal when idle)
    graph = (work / "s" / "memory.jsonl").read_text(encoding="utf-8")
    assert '"name": "routine:weekly-spend-review"' in graph.replace('":"', '": "')
    assert f"result ({second['run_id']}): Spend was flat" in graph
    assert "Traceback" not in daemon.log_text()


def month_report() -> dict[str, Any]:
    """A routine whose result is long (the CFO's month-end report), delivered to Telegram."""
    return {
        "assignee": "cfo",
        "description": "Report on the month-end close: every invoice and its bank line.",
        "expected_output": "The report, one line per invoice.",
        "trigger": {"cron": "0 3 29 2 *", "timezone": "UTC"},
        "catch_up": "skip",
        "deliver": ["telegram"],
    }


@pytest.mark.anyio
async def test_sixty_seconds_of_telegram_down_with_a_restart_lose_and_repeat_nothing(
    work: Path,
) -> None:
    # The Bot API stand-in refuses every connection for 60 s of the daemon's clock while
    # three results wait — two queued before a restart in the middle of the outage, one
    # after — so python-telegram-bot (real connections, refused), the sender's backoff (on
    # the clock) and the outbox (across the restart) all meet the outage.
    third = "Late payers, gently chased: Northwind sends the reminders so you don't have to."
    routines = {"daily-post": daily_post(deliver=["telegram"]), "month-report": month_report()}
    clock = ManualClock()
    async with BotApiServer(token=TOKEN) as server:
        with MessagesAPIServer() as llm:
            cfg = work / "company.yaml"
            cfg.write_text(yaml.safe_dump(company(server.url, routines), sort_keys=False))
            env = env_vars(server, llm)
            async with InProcessDaemon(
                cfg, work / "s", clock=clock, env=env, offline=False
            ) as daemon:
                await one(server, "companyd started")

                await server.go_down("refuse")
                down_at = clock.monotonic()
                llm.enqueue(reply_text(OUTAGE_POST))
                first = await daemon.call("run_job", routine="daily-post")
                llm.enqueue(reply_text(REPORT))
                report = await daemon.call("run_job", routine="month-report")
                assert first["status"] == report["status"] == "ok", (first, report)
                # a restart in the middle of the outage: what waits is in the outbox
                await daemon.advance(25)
                await daemon.restart()
                llm.enqueue(reply_text(third))
                last = await daemon.call("run_job", routine="daily-post")
                assert last["status"] == "ok", last
                # 60 s down on the daemon's clock, every retry refused
                await daemon.advance(60 - (clock.monotonic() - down_at))
                assert [m for m in server.messages if m.text.startswith("📝")] == []
                await server.go_up()

                # everything arrives once Telegram is back (the backoff is at most 30 s) ...
                await daemon.advance_until(lambda: bool(to_operator(server, third)), limit=90)
                await daemon.advance(60)  # room for a duplicate, were there one
                await asyncio.sleep(0.5)
                # everything arrives once Telegram is back (the backoff is at most 30 s) ...
                await one(server, third, timeout=90)
                await asyncio.sleep(2.0)  # room for a duplicate, were there one
                results = [m for m in server.messages if m.text.startswith("📝")]
                # ... exactly once each, in the order the routines produced them
                assert [m.document is not None for m in results] == [False, True, False]
                assert OUTAGE_POST in results[0].text and first["run_id"] in results[0].text
                assert third in results[2].text and last["run_id"] in results[2].text
                assert all(m.chat_id == OPERATOR for m in results)
                assert len(server.calls_of("sendDocument")) == 1
                doc = results[1]
                assert doc.document is not None
                assert doc.document.file_name == f"month-report-{report['run_id']}.md"
                assert REPORT in doc.document.data.decode("utf-8")  # the whole of it
                caption = doc.text.splitlines()
                assert caption[0] == "📝 month-report — cfo"
                assert caption[1] == (
                    f"📎 the whole result ({len(REPORT):,} characters): "
                    f"month-report-{report['run_id']}.md"
                )
                assert caption[3] == "Month-end close, November: every invoice matched."
                assert caption[-1] == (
                    f"— {run_cost(report['cost_usd'])} · {report['run_id']} · reply to follow up"
                )
                assert len(doc.text) <= 1024
                assert not doc.disable_notification  # a result rings

                # a reply to the document is a follow-up in its thread, like one to a message
                llm.enqueue(reply_text("Yes: NW-0007 was paid twice; I flagged it."))
                await linked(work / "s", doc.message_id)
                _, reply_id = server.inject_reply(OPERATOR, doc.message_id, "Any duplicates?")
                answer = await one(server, "NW-0007 was paid twice")
                assert answer.reply_to == reply_id
                assert "Invoice NW-0219" in prompt_text(llm.requests[-1].body)
                print(f"\n{doc.text}\n")  # for the docs, when it changes
    assert "Traceback" not in daemon.log_text()


@pytest.mark.anyio
async def test_a_result_in_quiet_hours_waits_for_their_end_and_a_critical_alert_does_not(
    work: Path,
) -> None:
    # the daemon's morning starts at 06:45 UTC and quiet hours end at 07:00, 900 s later on
    # its manual clock, which stands still while the daemon starts and runs
    sim0 = datetime(2026, 11, 27, 6, 45, tzinfo=UTC).timestamp()
    end = sim0 + 900
    clock = ManualClock(sim0)
    quiet = {"start": "23:00", "end": "07:00", "timezone": "UTC"}
    async with BotApiServer(token=TOKEN) as server:
        with MessagesAPIServer() as llm:
            cfg = work / "company.yaml"
            doc = company(server.url, {"daily-post": daily_post()}, quiet_hours=quiet)
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            env = env_vars(server, llm)
            async with InProcessDaemon(
                cfg, work / "s", clock=clock, env=env, offline=False
            ) as daemon:
                llm.enqueue(reply_text(POST))
                fired = await daemon.call("run_job", routine="daily-post")
                assert fired["status"] == "ok", fired
                # the next run's key is refused: a critical alert, told in quiet hours too
                llm.enqueue(fault(401, "invalid x-api-key"))
                await daemon.call("run_job", routine="daily-post")
                critical = await one(server, "Anthropic API key refused", timeout=60)
                assert critical.text.startswith("🔴")
                assert clock.time() < end, "the daemon took past the quiet hours to get here"
                assert to_operator(server, POST) == []  # the result waits for 07:00

                # one second before 07:00: still nothing
                await daemon.advance(end - 1 - clock.time())
                await asyncio.sleep(0.5)
                assert to_operator(server, POST) == []
                await daemon.advance_until(lambda: bool(to_operator(server, POST)), limit=120)
                post = to_operator(server, POST)[0]
                assert clock.time() >= end
                assert post.text.splitlines()[0] == "📝 daily-post — marketing"
                assert fired["run_id"] in post.text
                assert not post.disable_notification  # it rings, at 07:00
                # the warnings held meanwhile come as one quiet-hours digest, the result apart
                await daemon.advance_until(
                    lambda: bool(to_operator(server, "While quiet hours were on")), limit=120
                )
                await daemon.advance(60)  # room for a duplicate, were there one
                await asyncio.sleep(0.5)
                assert len(to_operator(server, POST)) == 1
                assert len(to_operator(server, "Anthropic API key refused")) == 1
    assert "Traceback" not in daemon.log_text()


@pytest.mark.anyio
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_follow_up_cut_by_a_restart_is_answered_once_in_its_thread(
    work: Path, sig: signal.Signals
) -> None:
    async with BotApiServer(token=TOKEN) as server:
        with MessagesAPIServer() as llm:
            cfg = work / "company.yaml"
            cfg.write_text(
                yaml.safe_dump(company(server.url, {"daily-post": daily_post()}), sort_keys=False)
            )
            env = env_for(server, llm)
            state = work / "s"
            first = DaemonProcess(
                cfg, state, log=work / "d1.log", env=env, offline=False, forked=True
            )
            # the daemon that comes back reads what the signalled process left: in this
            # process (the same composition root), on a manual clock that nothing here moves
            second = InProcessDaemon(cfg, state, env=env_vars(server, llm), offline=False)
            try:
                await first.start(timeout=120)
                await one(server, "companyd started")
                llm.enqueue(reply_text(POST))
                fired = await first.call("run_job", routine="daily-post")
                assert fired["status"] == "ok", fired
                post = await one(server, POST)
                await linked(state, post.message_id)

                # the founder replies; the follow-up's model call is in flight when the
                # daemon goes down (a deploy: SIGTERM; a crash: kill -9)
                llm.enqueue(stall(None))
                _, reply_id = server.inject_reply(OPERATOR, post.message_id, "Shorter please.")
                await asyncio.to_thread(llm.wait_for_requests, 2, 60.0)
                if sig is signal.SIGTERM:
                    assert await first.stop(timeout=60) == 0
                else:
                    first.send_signal(sig)
                    await first.wait(10)
                llm.release_stalls()
                llm.enqueue(reply_text(SHORTER))
                # a thread link older than retention.runs_days (90): pruned with the runs
                old = time.time() - 91 * 86400
                with contextlib.closing(sqlite3.connect(state / "alerts.sqlite")) as c, c:
                    c.execute(
                        "INSERT INTO threads VALUES (?, 1, 'run-0123456789ab', 'marketing', ?)",
                        (OPERATOR, old),
                    )

                # the journal resumes the follow-up; its answer comes back in the thread
                await second.start(timeout=120)
                answer = await one(server, SHORTER, timeout=90)
                assert answer.reply_to == reply_id
                assert answer.text.splitlines()[0] == "💬 marketing"
                shown = prompt_text(llm.requests[-1].body)
                assert POST in shown and "Shorter please." in shown
                runs = (await second.call("runs", agent="marketing", limit=5))["runs"]
                follow = next(r for r in runs if r["answer"] == SHORTER)
                assert follow["run_id"] in answer.text

                # ... and a reply to that answer goes on in the thread
                llm.enqueue(reply_text("Done: the short one goes out at 14:00."))
                await linked(state, answer.message_id)
                _, again = server.inject_reply(OPERATOR, answer.message_id, "Good.")
                last = await one(server, "Done: the short one goes out")
                assert last.reply_to == again
                await second.quiet()  # a duplicate, were there one, is sent by now
                # the three messages linked to their runs, the stale link pruned (a second
                # answer would be linked too: counted below, not waited out here)
                threaded = {post.message_id, answer.message_id, last.message_id}
                async with asyncio.timeout(30):
                    while not (threaded <= (links := _thread_links(state)) and 1 not in links):
                        await asyncio.sleep(0.1)
            finally:
                try:
                    await second.stop()
                finally:
                    second.close()
                    if first.proc is not None and first.returncode is None:
                        await first.stop()
    assert len(to_operator(server, SHORTER)) == 1  # once, not again after the restart
    assert len(to_operator(server, POST)) == 1
    assert _thread_links(state) == threaded
    assert "Traceback" not in first.log_text() + second.log_text()


@pytest.mark.anyio
async def test_a_result_of_the_offline_model_says_its_cost_is_simulated(work: Path) -> None:
    # `companyd run --offline` prices its runs as Claude's would be, but no money is spent:
    # the result's message says "(simulated)" after the cost, as `companyd runs` marks it,
    # and so does its file (deliver: file) — not a bare "$0.0056" a founder reads as spent
    clock = ManualClock()
    async with BotApiServer(token=TOKEN) as server:
        cfg = work / "company.yaml"
        routine = daily_post(deliver=["telegram", "file"])
        cfg.write_text(yaml.safe_dump(company(server.url, {"daily-post": routine})))
        env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_CHAT_ID": str(OPERATOR)}
        async with InProcessDaemon(cfg, work / "s", clock=clock, env=env, offline=True) as daemon:
            fired = await daemon.call("run_job", routine="daily-post")
            assert fired["status"] == "ok", fired
            assert fired["cost_usd"] > 0  # priced as Claude's would be
            cost = run_cost(fired["cost_usd"])
            post = await one(server, "📝 daily-post")
            assert post.text.splitlines()[-1] == (
                f"— {cost} (simulated) · {fired['run_id']} · reply to follow up"
            )
        (written,) = (work / "s" / "outputs" / "daily-post").glob("*.md")
        assert f"marketing · {cost} (simulated) · {fired['run_id']}" in written.read_text()


@pytest.mark.anyio
async def test_the_start_message_names_company_yaml_s_warnings(work: Path) -> None:
    # a warning is the file saying something the founder likely did not mean (here a
    # company budget no call fits in): the journal has it, and so does the start's message
    clock = ManualClock()
    async with BotApiServer(token=TOKEN) as server:
        cfg = work / "company.yaml"
        doc = company(server.url, {"daily-post": daily_post()})
        doc["company"]["budget"] = {"daily_usd": 0.02, "monthly_usd": 200}
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
        env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_CHAT_ID": str(OPERATOR)}
        async with InProcessDaemon(cfg, work / "s", clock=clock, env=env, offline=True):
            started = await one(server, "companyd started")
            lines = started.text.splitlines()
            assert "⚠ company.yaml has 1 warning:" in lines
            (warning,) = [x for x in lines if x.startswith("• ")]
            assert "company.budget.daily_usd: the company's daily budget of $0.02" in warning
