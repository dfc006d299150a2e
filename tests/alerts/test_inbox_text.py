"""``/inbox`` and ``companyd inbox`` say how long each item has waited and when it expires
(then: denied); ``/resume all`` resumes every paused agent (the one command after topping
up the Anthropic account).
"""

from __future__ import annotations

from typing import Any

import pytest

from companyd.admin._results import Inbox, InboxItem, ResumedAll
from companyd.admin._status_text import waiting_text
from companyd.alerts._ops import command_reply, format_inbox
from companyd.alerts._render_status import format_jobs

T0 = 1_800_000_000.0


def test_the_phone_inbox_shows_age_and_expiry() -> None:
    inbox = Inbox(
        items=[
            InboxItem(
                id="ap-1",
                kind="approval",
                agent="cfo",
                created=T0,
                summary="cfo wants to call pay_invoice",
                actions=["approve", "reject"],
                deadline=T0 + 86_400,
            )
        ]
    )
    text = format_inbox(inbox, now=T0 + 18 * 3600)
    assert "waiting 18h 00m · expires in 6h 00m (then denied)" in text
    assert "/approve ap-1" in text


def test_waiting_text() -> None:
    assert waiting_text(T0, None, T0 + 90) == "waiting 1m 30s"
    assert waiting_text(T0, T0 + 60, T0 + 90) == "waiting 1m 30s · expired: denied"
    # a kept result asks for nothing: it is not denied, it leaves the inbox (issue 28)
    assert waiting_text(T0, T0 + 60, T0 + 30, "kept") == (
        "waiting 30s · expires in 30s (then it leaves the inbox)"
    )
    assert waiting_text(T0, T0 + 60, T0 + 90, "kept") == (
        "waiting 1m 30s · expired: left the inbox unread"
    )


class _Admin:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def resume_all(self, via: str = "cli") -> ResumedAll:
        self.calls.append("resume_all")
        return ResumedAll(resumed=["ceo", "cfo"], message="resumed ceo, cfo")

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected Admin call {name}")


@pytest.mark.anyio
async def test_resume_all_on_the_phone() -> None:
    admin = _Admin()
    reply = await command_reply(admin, "resume", ["all"], ["ceo", "cfo"])
    assert admin.calls == ["resume_all"] and "resumed ceo, cfo" in reply


def test_the_phone_jobs_list_shows_a_routine_paused_after_failures() -> None:
    text = format_jobs(
        {
            "routines": [
                {"routine": "flaky", "agent": "coo", "schedule": "every 10m", "paused": "why"},
                {"routine": "fine", "agent": "coo", "schedule": "every 1h"},
            ]
        }
    )
    assert "⏸ paused after failed runs: `companyd jobs resume flaky`" in text
    assert text.count("⏸") == 1
