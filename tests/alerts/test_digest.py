"""The results digest (alerts/_digest.py) and how the alert book releases results: pure,
on explicit times (no clock).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from companyd.alerts._coalesce import AlertBook
from companyd.alerts._deliver import CAPTION_LIMIT, result_records, result_text
from companyd.alerts._digest import fold, next_digest
from companyd.alerts._outbox import AlertRecord, Delivery
from companyd.alerts._policy import Policy
from companyd.alerts._telegram import TelegramSettings
from companyd.clock import ManualClock
from companyd.config import QuietHoursSpec, load_config_text

BERLIN = ZoneInfo("Europe/Berlin")
UTC = ZoneInfo("UTC")


def at(text: str, tz: ZoneInfo = UTC) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=tz).timestamp()


def test_next_digest_is_the_next_time_of_day_in_the_company_zone() -> None:
    assert next_digest(at("2026-11-25 07:59"), "08:00", UTC) == at("2026-11-25 08:00")
    assert next_digest(at("2026-11-25 08:00"), "08:00", UTC) == at("2026-11-26 08:00")
    # 08:00 in Berlin is 07:00 UTC in winter
    assert next_digest(at("2026-11-25 07:30"), "08:00", BERLIN) == at("2026-11-26 07:00")


def item(rid: int, day: str, routine: str, cost: float, answer: str) -> AlertRecord:
    ts = at(day)
    return AlertRecord(
        id=rid,
        key=f"digest_item|{rid}",
        kind="digest_item",
        severity="info",
        source="alerts",
        data={
            "routine": routine,
            "agent": "marketing",
            "run_id": f"run-{rid}",
            "cost_usd": cost,
            "answer": answer,
        },
        counts={"digest_item": 1},
        first_ts=ts,
        last_ts=ts,
        window_end=ts,
        deliveries={1: Delivery()},
    )


def test_the_digest_has_one_line_per_result_and_a_button_each() -> None:
    items = [
        item(1, "2026-11-24 14:00", "daily-post", 0.3, "Invoices chase themselves now. " * 5),
        item(2, "2026-11-24 09:00", "weekly-spend-review", 0.11, "Spend was flat."),
    ]
    d = fold(items, digest_id=9, now=at("2026-11-25 08:00"), tz=UTC, chats=[1])
    lines = d.text.splitlines()
    assert lines[0] == "📰 Yesterday's work: 2 results, $0.41"
    # each result's cost as `companyd runs` prints it, the total as the spend CLI does
    assert lines[2].startswith("1. daily-post (marketing, $0.3000): Invoices chase themselves now.")
    assert lines[2].endswith("…") and len(lines[2]) < 130
    assert lines[3] == "2. weekly-spend-review (marketing, $0.1100): Spend was flat."
    tiny = item(3, "2026-11-24 10:00", "heartbeat", 0.0035, "Alive.")
    small = fold([tiny], digest_id=10, now=at("2026-11-25 08:00"), tz=UTC, chats=[1])
    # exact: not $0.00, nor $0.004
    assert small.text.splitlines()[0] == "📰 Yesterday's work: 1 result, $0.0035"
    assert small.text.splitlines()[2] == "1. heartbeat (marketing, $0.0035): Alive."
    assert [(b["label"], b["action"], b["arg"]) for b in d.buttons] == [
        ("📄 1", "open_result", 1),
        ("📄 2", "open_result", 2),
    ]
    assert all(i.status == "folded" and i.folded_into == 9 for i in items)
    assert all(dl.state == "folded" for i in items for dl in i.deliveries.values())


def _record(to: str, outcome: str, text: str, **more: object) -> dict[str, object]:
    return {"to": to, "outcome": outcome, "at": 0.0, "where": None, "message_id": None,
            "reason": None, "kept": None, "text": text, **more}  # fmt: skip


def test_the_digest_says_where_else_each_result_went_from_its_delivery_records() -> None:
    """Issue 28: under each result, where it was sent — from the run's delivery record."""
    items = [
        item(1, "2026-11-24 14:00", "daily-post", 0.3, "Invoices chase themselves now."),
        item(2, "2026-11-24 09:00", "weekly-spend-review", 0.11, "Spend was flat."),
        item(3, "2026-11-24 10:00", "standup", 0.01, "All green."),
    ]
    deliveries = {
        "run-1": [
            _record("digest", "queued", "queued for the digest of 2026-11-25 08:00"),
            _record("telegram", "queued", "queued for telegram at 14:00 (in the outbox …)"),
            _record("telegram", "delivered", "delivered to telegram at 14:01 (message 7)"),
            _record("file", "delivered", "written to outputs/daily-post/2026-11-24-run-1.md"),
        ],
        "run-2": [
            _record(
                "telegram",
                "not_delivered",
                "not delivered to telegram: Telegram is not configured — kept in the inbox",
                reason="Telegram is not configured (no alerts.telegram in company.yaml)",
                kept="k-1234",
            ),
            _record("memory", "delivered", "added to the company memory (routine:w)"),
        ],
        "run-3": [_record("digest", "queued", "queued for the digest of 2026-11-25 08:00")],
    }
    d = fold(
        items, digest_id=9, now=at("2026-11-25 08:00"), tz=UTC, chats=[1], deliveries=deliveries
    )
    lines = d.text.splitlines()
    assert lines[2:8] == [
        "1. daily-post (marketing, $0.3000): Invoices chase themselves now.",
        "   → sent to telegram · written to outputs/daily-post/2026-11-24-run-1.md",
        "2. weekly-spend-review (marketing, $0.1100): Spend was flat.",
        "   → kept in the inbox: Telegram is not configured · added to the company memory",
        "3. standup (marketing, $0.0100): All green.",  # only the digest: nothing more to say
        "",
    ]


@pytest.mark.anyio
async def test_results_are_held_through_quiet_hours_and_released_one_by_one() -> None:
    cfg = load_config_text(
        "schema: companyd/v1\ncompany: {name: Acme, budget: {daily_usd: 5}}\n"
        "agents: {ceo: {title: CEO, instructions: Lead.}}\n",
        file="c.yaml",
    )
    clock = ManualClock(at("2026-11-24 23:30"))
    quiet = QuietHoursSpec(start="23:00", end="07:00")
    book = AlertBook(Policy.of(cfg), clock)
    book.policy = dataclasses.replace(book.policy, quiet=quiet, quiet_tz=UTC, tz=UTC)
    book.settings = TelegramSettings(token="t", chat_ids=(1,))
    data = {
        "routine": "daily-post",
        "agent": "marketing",
        "run_id": "run-1",
        "cost_usd": 0.01,
        "answer": "x\n" * 3000,
    }
    parts = result_records(book, data, kind="result", now=clock.time(), chats=[1])
    assert len(parts) == 2  # a long result is split, not cut
    assert parts[0].text.startswith("📝 daily-post — marketing")
    assert all(p.held_until == at("2026-11-25 07:00") for p in parts)
    await book.release_held(at("2026-11-25 07:00"))
    # released each whole, not folded into the quiet-hours digest
    assert [p.held_until for p in parts] == [None, None]
    assert all(r.kind != "digest" for r in book.alerts.values())
    # a run's cost as `companyd runs` prints it (alerts/_values.run_cost): four decimals at
    # least, more where a tiny cost needs them (not "$0.0000"), thousands separated
    assert result_text(data).endswith("— $0.0100 · run-1 · reply to follow up")
    tiny = {**data, "cost_usd": 0.00004}
    assert result_text(tiny).endswith("— $0.00004 · run-1 · reply to follow up")
    big = {**data, "cost_usd": 1234.5}
    assert result_text(big).endswith("— $1,234.5000 · run-1 · reply to follow up")


@pytest.mark.parametrize(
    ("routine", "run_id"),
    [("month-report", "run-0123456789ab"), ("r" * 300, "run-" + "9" * 400)],
)
def test_a_result_over_three_messages_is_one_md_document_with_a_short_caption(
    routine: str, run_id: str
) -> None:
    cfg = load_config_text(
        "schema: companyd/v1\ncompany: {name: Acme, budget: {daily_usd: 5}}\n"
        "agents: {ceo: {title: CEO, instructions: Lead.}}\n",
        file="c.yaml",
    )
    clock = ManualClock(at("2026-11-24 23:30"))
    book = AlertBook(Policy.of(cfg), clock)
    book.policy = dataclasses.replace(
        book.policy, quiet=QuietHoursSpec(start="23:00", end="07:00"), quiet_tz=UTC, tz=UTC
    )
    book.settings = TelegramSettings(token="t", chat_ids=(1, 2))
    report = "Month-end close.\n\n" + "\n".join(
        f"{i}. Invoice NW-{i:04d} matched." for i in range(600)
    )
    data = {
        "routine": routine,
        "agent": "cfo",
        "run_id": run_id,
        "cost_usd": 0.0123,
        "answer": report,
        "ended": at("2026-11-24 23:29"),
    }
    (rec,) = result_records(book, data, kind="result", now=clock.time(), chats=[1, 2])
    name = f"{routine}-{run_id}.md"
    assert rec.data["document"]["name"] == name
    body = rec.data["document"]["body"]
    assert body.startswith(f"# {routine} — 2026-11-24 23:29 UTC\n\ncfo · $0.0123 · {run_id}\n\n")
    assert report in body  # whole, not cut
    assert len(rec.text) <= CAPTION_LIMIT
    lines = rec.text.splitlines()
    assert lines[0] == f"📝 {routine} — cfo"
    if len(routine) < 100:  # else only the limit holds: the caption is cut
        assert lines[-1] == f"— $0.0123 · {run_id} · reply to follow up"
        assert lines[1] == f"📎 the whole result ({len(report):,} characters): {name}"
        assert lines[3:5] == ["Month-end close.", ""]
    assert rec.held_until == at("2026-11-25 07:00")  # quiet hours hold it like a message
    assert set(rec.deliveries) == {1, 2}
    # three messages' worth is still split
    data["answer"] = "x\n" * 5000
    parts = result_records(book, data, kind="result", now=clock.time(), chats=[1])
    assert len(parts) == 3 and all("document" not in p.data for p in parts)


def test_an_offline_daemons_results_say_their_cost_is_simulated() -> None:
    # `companyd run --offline` prices runs as Claude's would be: the digest says so per line,
    # and in its total when every result is simulated; a run on Claude says nothing more
    simulated = [item(1, "2026-11-24 14:00", "daily-post", 0.3, "Posted.")]
    simulated[0].data["offline"] = True
    d = fold(simulated, digest_id=9, now=at("2026-11-25 08:00"), tz=UTC, chats=[1])
    assert d.text.splitlines()[0] == "📰 Yesterday's work: 1 result, $0.30 (simulated)"
    assert d.text.splitlines()[2] == "1. daily-post (marketing, $0.3000 (simulated)): Posted."
    mixed = [*simulated, item(2, "2026-11-24 09:00", "weekly-spend-review", 0.11, "Flat.")]
    d = fold(mixed, digest_id=10, now=at("2026-11-25 08:00"), tz=UTC, chats=[1])
    assert d.text.splitlines()[0] == "📰 Yesterday's work: 2 results, $0.41"
    assert d.text.splitlines()[3] == "2. weekly-spend-review (marketing, $0.1100): Flat."
    answer = {"agent": "ceo", "answer": "Yes.", "cost_usd": 0.0054, "run_id": "run-1"}
    assert result_text({**answer, "offline": True}).endswith(
        "— $0.0054 (simulated) · run-1 · reply to follow up"
    )
    assert result_text(answer).endswith("— $0.0054 · run-1 · reply to follow up")
