"""An ``unverified`` result says so wherever it goes (issue 27): the Telegram message (and a
long result's caption), the digest line, the delivered file, the approval message — pure, on
the renderers the pager uses.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from companyd.alerts._deliver import document_body, document_of, result_text
from companyd.alerts._digest import fold
from companyd.alerts._outbox import AlertRecord, Delivery
from companyd.alerts._render_kinds import render

UTC = ZoneInfo("UTC")
WHY = "no successful call of post_update; the answer says 'posted'"
DATA = {
    "routine": "daily-post",
    "agent": "marketing",
    "run_id": "run-0123456789ab",
    "cost_usd": 0.02,
    "answer": "Done — posted.",
    "unverified": WHY,
}


def test_the_message_file_and_caption_warn_before_the_result() -> None:
    lines = result_text(DATA).splitlines()
    assert lines[:4] == ["📝 daily-post — marketing", f"⚠ unverified: {WHY}", "", "Done — posted."]
    assert "unverified" not in result_text({**DATA, "unverified": None})
    body = document_body(DATA, 0.0, UTC)
    assert f"**⚠ unverified: {WHY}**" in body
    assert body.index("⚠ unverified") < body.index("Done — posted.")
    _, _, caption = document_of({**DATA, "answer": "x\n" * 5000}, 0.0, UTC)
    assert caption.splitlines()[1] == f"⚠ unverified: {WHY}"


def test_the_digest_line_says_it_first() -> None:
    ts = datetime(2026, 11, 24, 14, tzinfo=UTC).timestamp()
    rec = AlertRecord(
        id=1,
        key="digest_item|1",
        kind="digest_item",
        severity="info",
        source="alerts",
        data=DATA,
        counts={"digest_item": 1},
        first_ts=ts,
        last_ts=ts,
        window_end=ts,
        deliveries={1: Delivery()},
    )
    d = fold([rec], digest_id=2, now=ts + 3600, tz=UTC, chats=[1])
    assert d.text.splitlines()[2] == (
        f"1. daily-post (marketing, $0.0200): ⚠ unverified: {WHY} — Done — posted."
    )


def test_an_approval_shows_it_before_the_founder_decides() -> None:
    data = {
        "item_id": "r-1",
        "agent": "marketing",
        "run_id": "run-0123456789ab",
        "routine": "daily-post",
        "deadline": 0.0,
        "task": "Post it.",
        "answer": "Done — posted.",
        "cost_usd": 0.02,
        "round": 1,
        "unverified": WHY,
    }
    rendered, _ = render("founder_result_for_approval", data, "agent/marketing", {}, [])
    assert rendered.lines[0] == f"⚠ unverified: {WHY}"
    plain, _ = render(
        "founder_result_for_approval", {**data, "unverified": None}, "agent/marketing", {}, []
    )
    assert not any("unverified" in ln for ln in plain.lines)


def test_the_twice_in_a_row_alert() -> None:
    data = {
        "routine": "daily-post",
        "agent": "marketing",
        "scheduled": "2026-11-24T14:00:00+00:00",
        "reason": WHY,
        "run_id": "run-0123456789ab",
        "outcome": "unverified",
        "fire_kind": "scheduled",
        "fire_id": "f-1",
        "in_a_row": 2,
    }
    rendered, buttons = render("routine_unverified", data, "scheduler", {}, ["marketing"])
    assert rendered.title == "routine daily-post: unverified twice in a row"
    assert f"why: {WHY}" in rendered.lines
    assert [b.action for b in buttons] == ["run_job"]
