"""The channels' parts (issue 30, docs/alerts.md "Other channels"): the Apprise target's
errors and deadline, and which alerts and results the fan-out gives which channel.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from companyd.alerts._channels import KIND, AppriseTarget, Fanout, _shown, target_name
from companyd.alerts._outbound import (
    OutboundMessage,
    OutboundQueue,
    PermanentSendError,
    TransientSendError,
)
from companyd.alerts._outbox import AlertStore
from companyd.alerts._policy import Policy
from companyd.clock import ManualClock
from companyd.config import ChannelSpec, load_config_text
from companyd.events import BudgetThreshold, ChildExited, RoutineMissed, RoutineResult, Severity
from companyd.storage import Backend

pytestmark = pytest.mark.anyio

COMPANY = """\
schema: companyd/v1
company: {name: Acme, budget: {daily_usd: 5}}
agents:
  cfo: {title: CFO, instructions: Count.}
alerts:
  min_severity: critical
  coalesce_seconds: 600
  channels:
    - {name: pager, url_env: PAGER_URL, min_severity: critical}
    - {name: slack, url_env: SLACK_URL, deliver: true}
    - {name: all, url_env: ALL_URL, min_severity: info}
"""


def message(**data: str) -> OutboundMessage:
    return OutboundMessage(
        id="msg_1", target="channel:x", type="alert", timestamp=0.0, data=data, body="", attempt=1
    )


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


async def test_a_send_that_hangs_is_cut_at_the_deadline_and_retried(silent_port: int) -> None:
    spec = ChannelSpec(name="ops", url_env="OPS_URL")
    clock = [1000.0]
    target = AppriseTarget(
        spec, f"json://127.0.0.1:{silent_port}/hook", deadline=0.5, now=lambda: clock[0]
    )
    started = time.monotonic()
    with pytest.raises(TransientSendError, match=r"did not answer within 0.5 s"):
        await target.send(message(title="t", body="b", severity="warning"))
    assert time.monotonic() - started < 3.0  # the deadline, not Apprise's own timeouts
    assert target.health() == {
        "name": "ops",
        "state": "failing",
        "since": 1000.0,
        "error": "json did not answer within 0.5 s",
    }


async def test_a_url_apprise_cannot_use_is_final_and_an_unset_one_waits() -> None:
    spec = ChannelSpec(name="ops", url_env="OPS_URL")
    with pytest.raises(PermanentSendError, match="Apprise cannot use this nosuch:// URL"):
        await AppriseTarget(spec, "nosuch://abc/def").send(message(title="t"))
    unset = AppriseTarget(spec, None)
    with pytest.raises(TransientSendError, match=r"\$OPS_URL is not set"):
        await unset.send(message(title="t"))
    assert unset.health()["state"] == "unset"


def crash(ts: float, child: str = "cfo") -> ChildExited:
    return ChildExited(
        source="companyd/agents",
        ts=ts,
        child=child,
        restart_type="permanent",
        action="restart",
        reason="error",
        exception="RuntimeError",
        message="boom",
    )


def budget_reached(ts: float) -> BudgetThreshold:
    """The company's daily budget reached (a critical alert)."""
    return BudgetThreshold(
        source="spend",
        severity=Severity.CRITICAL,
        scope="company",
        agent=None,
        period="day",
        key="company/day",
        level=1.0,
        used_usd=5.0,
        limit_usd=5.0,
        resets_at="2027-01-16T00:00:00+00:00",
        message="Daily budget reached",
        ts=ts,
    )


def test_each_channel_gets_the_alerts_at_its_own_floor_once_per_story() -> None:
    cfg = load_config_text(COMPANY, file="c.yaml")
    fan = Fanout(cfg.spec.alerts.channels, Policy.of(cfg))
    # a crash is a warning: slack (default floor) and all (info), not pager (critical) —
    # whatever alerts.min_severity (critical) says for Telegram
    items = fan.items(crash(100.0), now=100.0)
    assert [i.target for i in items] == ["channel:slack", "channel:all"]
    assert {(i.kind, i.type) for i in items} == {(KIND, "alert")}
    assert items[0].data["title"].endswith("cfo crashed and was restarted")
    assert items[0].data["severity"] == "warning"
    assert "Acme" in items[0].data["body"]
    # the same story within the window: not again; after it, or another story: yes
    assert fan.items(crash(200.0), now=200.0) == []
    assert [i.target for i in fan.items(crash(300.0, "ceo"), now=300.0)] == [
        "channel:slack",
        "channel:all",
    ]
    assert len(fan.items(crash(800.0), now=800.0)) == 2
    budget = budget_reached(900.0)
    assert [i.target for i in fan.items(budget, now=900.0)] == [
        "channel:pager",
        "channel:slack",
        "channel:all",
    ]


def test_a_channel_s_message_reads_one_clock_the_company_s() -> None:
    """A channel's founder reads the times of a message on the company's clock, as its
    footer gives it — not a fire "scheduled for 21:00 UTC" above "23:00 CET".
    """
    berlin = COMPANY.replace("{name: Acme,", "{name: Acme, timezone: Europe/Berlin,")
    cfg = load_config_text(berlin, file="c.yaml")
    fan = Fanout(cfg.spec.alerts.channels, Policy.of(cfg))
    at = datetime(2027, 1, 15, 22, 0, tzinfo=UTC).timestamp()
    missed = RoutineMissed(
        source="scheduler",
        ts=at,
        routine="daily-post",
        agent="cfo",
        scheduled="2027-01-15T21:00:00+00:00",
        reason="daemon was down",
        run_id=None,
        outcome="missed",
        fire_kind="scheduled",
        fire_id="f-1",
    )
    body = fan.items(missed, now=at)[0].data["body"]
    assert "scheduled for: 2027-01-15 22:00 CET" in body, body
    assert "Acme · 23:00 CET, 15 Jan" in body, body


def test_only_results_for_the_founder_reach_the_deliver_true_channels() -> None:
    cfg = load_config_text(COMPANY, file="c.yaml")
    fan = Fanout(cfg.spec.alerts.channels, Policy.of(cfg))
    result = RoutineResult(
        source="scheduler",
        routine="daily-post",
        agent="cfo",
        run_id="run-1",
        cost_usd=0.0123,
        answer="Five ways clinics lose patients.",
        task="Draft today's post.",
        deliver=["telegram"],
        scheduled="2027-01-15T08:00:00+00:00",
        fire_id="fire-1",
        ended=1000.0,
        unverified="no successful call of post_update",
    )
    [item] = fan.items(result, now=1000.0)
    assert (item.target, item.type, item.key) == (target_name("slack"), "result", "result:run-1")
    assert item.data["title"] == "📝 daily-post — cfo"
    assert item.data["body"].startswith("⚠ unverified: no successful call of post_update\n")
    assert "Five ways clinics lose patients." in item.data["body"]
    assert item.data["answer"] == result.answer  # kept whole if no channel takes it
    assert fan.items(replace(result, deliver=["memory", "file"]), now=1000.0) == []
    assert len(fan.items(replace(result, deliver=["digest"]), now=1000.0)) == 1


async def test_quiet_hours_hold_a_channel_s_alerts_and_results_as_telegram_s(
    tmp_path: Path, state_backend: Backend
) -> None:
    # 01:00–03:00 UTC quiet; the crash at 02:00 (a warning) and the result are held to 03:00,
    # folded into one message per channel; a critical alert is not held
    quiet = COMPANY.replace(
        "  coalesce_seconds: 600\n",
        "  coalesce_seconds: 600\n  quiet_hours: {start: '01:00', end: '03:00', timezone: UTC}\n",
    )
    cfg = load_config_text(quiet, file="c.yaml")
    fan = Fanout(cfg.spec.alerts.channels, Policy.of(cfg))
    night = datetime(2027, 1, 15, 2, 0, tzinfo=UTC).timestamp()
    end = night + 3600
    items = fan.items(crash(night), now=night)
    assert [(i.target, i.not_before, i.fold) for i in items] == [
        ("channel:slack", end, True),
        ("channel:all", end, True),
    ]
    assert items[0].key == items[1].key == f"quiet:{end!r}"
    # the same story again (a crash loop): folded into the held message, counted
    again = fan.items(crash(night + 30), now=night + 30)
    assert [(i.target, i.key, i.fold) for i in again] == [
        ("channel:slack", f"quiet:{end!r}", True),
        ("channel:all", f"quiet:{end!r}", True),
    ]
    # alone in the window, the story is sent as Telegram sends its alert: with its count
    title, body, _ = _shown({"items": [items[0].data["items"][0], again[0].data["items"][0]]})
    assert title == "🟠 cfo is crash-looping: 2 crashes"
    assert "×2 in 30 s (first 02:00, last 02:00)" in body.splitlines()
    budget = budget_reached(night + 60)
    critical = fan.items(budget, now=night + 60)
    assert len(critical) == 3 and {(i.not_before, i.fold) for i in critical} == {(None, False)}
    result = RoutineResult(
        source="scheduler",
        routine="daily-post",
        agent="cfo",
        run_id="run-1",
        cost_usd=0.01,
        answer="Done.",
        task="Post.",
        deliver=["telegram"],
        scheduled="2027-01-15T02:00:00+00:00",
        fire_id="fire-1",
        ended=night + 120,
    )
    [held] = fan.items(result, now=night + 120)
    assert (held.not_before, held.fold) == (end, False)
    assert fan.items(result, now=end)[0].not_before is None  # after the window: at once

    # in the outbound queue: held rows wait without holding back the critical one, and
    # two held alerts of a channel become one digest at the window's end
    store = AlertStore(tmp_path / "alerts.sqlite", backend=state_backend)
    assert await store.open() is None
    try:
        clock = ManualClock(start=night + 180)
        sent: list[tuple[str, str, str]] = []

        class Collect:
            name, kind = "channel:slack", KIND

            async def send(self, message: OutboundMessage) -> None:
                sent.append(_shown(message.data))

        queue = OutboundQueue(store, {"channel:slack": Collect()}, clock)
        slack = [i for i in items if i.target == "channel:slack"]
        later = fan.items(crash(night + 900, "ceo"), now=night + 900)
        await queue.enqueue([*slack, *[i for i in critical if i.target == "channel:slack"]])
        await queue.enqueue([i for i in again if i.target == "channel:slack"])
        await queue.enqueue([i for i in later if i.target == "channel:slack"])
        assert await queue.deliver_pass() == end
        assert [s[2] for s in sent] == ["critical"]
        clock.advance(end - clock.time())
        assert await queue.deliver_pass() is None
        title, body, severity = sent[1]
        assert title == "🌙 While quiet hours were on: 2 alerts" and severity == "warning"
        # in Telegram's words: the story as it stands, how many times, since when
        assert body.splitlines() == [
            "• 🟠 cfo is crash-looping: 2 crashes (×2) — 02:00",
            "• 🟠 ceo crashed and was restarted — 02:15",
            "Acme",
        ]
    finally:
        await store.close()
