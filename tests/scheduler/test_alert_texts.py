"""What the operator reads for the routine events the real scheduler publishes (issue 9:
"a routine failed, was missed or skipped" arrives with its content).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from alertkit import alert_text
from companyd.alerts._render_status import format_jobs
from companyd.events import Event
from companyd.runs import RunStatus

from .conftest import Harness, company

pytestmark = pytest.mark.anyio

MakeHarness = Callable[..., Harness]


def text_of(event: Event) -> str:
    return alert_text(event, agents={"coo"}, company="Test Co")


async def test_missed_failed_and_skipped_alerts_tell_how_many_when_and_why(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        company(
            """\
            heartbeat: {assignee: coo, description: Look., trigger: {every: 5m}, catch_up: skip}
            nightly: {assignee: coo, description: Night., trigger: {cron: "0 13 * * *"}}
            slow: {assignee: coo, description: Slow., trigger: {cron: "0,1 14 * * *"}}
            """
        ),
        start="2027-01-04T12:00:00",
    )
    h.sink.script["nightly"] = lambda t: (RunStatus.BUDGET_EXHAUSTED, "daily budget $5 spent", 0)
    await h.start()
    await h.advance_to("2027-01-04T12:07:00")
    await h.stop()
    h.clock.advance(3600)  # down 12:07–13:07: 12 heartbeats missed
    await h.start()
    [missed] = [e for e in h.kinds("routine_missed") if e.data["routine"] == "heartbeat"]
    text = text_of(missed)
    assert "routine heartbeat missed 12 runs" in text
    assert "first: 2027-01-04 12:10 UTC" in text
    assert "last: 2027-01-04 13:05 UTC" in text
    assert "daemon was down" in text

    # nightly's 13:00 fire was missed too (skip is its default); let it fail tomorrow.
    await h.advance_to("2027-01-05T13:00:00")
    failed = [e for e in h.kinds("routine_failed") if e.data["routine"] == "nightly"]
    text = text_of(failed[-1])
    assert "routine nightly failed" in text
    assert "outcome: budget_exhausted" in text
    assert "reason: daily budget $5 spent" in text
    assert "scheduled for: 2027-01-05 13:00 UTC" in text
    assert "[🔁 Run again now]" in text

    h.sink.hold = True
    h.sink.gate.clear()
    await h.advance_to("2027-01-05T14:01:00", runs=False)
    [skipped] = [e for e in h.kinds("routine_skipped") if e.data["routine"] == "slow"]
    text = text_of(skipped)
    assert "routine slow skipped a run" in text
    assert "scheduled for: 2027-01-05 14:01 UTC" in text
    assert "still active" in text


async def test_jobs_on_a_phone_is_one_short_block_per_routine(make_harness: MakeHarness) -> None:
    # /jobs answers with the live schedule; with every field of every routine (the old
    # generic dump) a company of six routines ran past the message's 80-line clip.
    routines = "".join(
        f'r{i}: {{assignee: coo, description: R., trigger: {{cron: "0 {i} * * *"}}}}\n'
        for i in range(12)
    )
    h = make_harness(
        company(
            routines + "off: {assignee: coo, description: O., trigger: {every: 1h}, "
            "enabled: false}\n"
        ),
        start="2027-01-04T00:30:00",
    )
    h.sink.script["r3"] = lambda t: (RunStatus.FAILED, "HTTP 500 (injected)", 0.0)
    sched = await h.start()
    await h.advance_to("2027-01-05T05:30:00")
    text = format_jobs(json.loads(json.dumps(await sched.jobs())))
    lines = text.splitlines()
    assert lines[0] == "⏰ routines"
    assert "• r11 → coo · cron '0 11 * * *' UTC" in lines
    assert "  next 2027-01-05 11:00 UTC · last ok · 7d 100% (1/1)" in lines
    assert "  next 2027-01-06 03:00 UTC · last failed · 7d 0% (0/2)" in lines
    assert "  why: HTTP 500 (injected)" in lines
    assert "• off → coo · every 1h" in lines and "  disabled" in lines
    assert len(lines) < 40
