"""Restarts (companyd.supervision._restart) against §1.3–1.6 and §1.9: restart types,
strategies, intensity, the restart loop, backoff (D8) and automatic shutdown.

Every test runs real children (asyncio tasks) under a real Supervisor, with a ManualClock for
every window, timeout and delay, so nothing here sleeps for real except for a few loop
iterations. Section numbers refer to §1 of ../shared/reference/otp-supervisor.md; the test
kit is in supkit.py.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus, Severity
from companyd.supervision import (
    AlreadyPresent,
    AlreadyStarted,
    Backoff,
    ChildRestarting,
    StartFailed,
    Supervisor,
    SupervisorGaveUp,
)

from .supkit import DEADLINE, Events, Probe, crash_and_wait, make, settle, states, until

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------------------------------
# §1.3 exit reasons × restart types


EXITS = {
    "normal": ("normal", None),
    "shutdown": ("shutdown", None),
    "shutdown_info": ("shutdown", "done"),
    "error": ("crash", None),
    "foreign_cancel": ("foreign_cancel", None),
}


REASON = {
    "normal": "normal",
    "shutdown": "shutdown",
    "shutdown_info": "shutdown:done",
    "error": "error:RuntimeError('x crashed')",
    # issue 15 #21: cancelled by code other than its supervisor is OTP's brutal kill
    "foreign_cancel": "killed",
}


@pytest.mark.parametrize("restart", ["permanent", "transient", "temporary"])
@pytest.mark.parametrize("exit_kind", list(EXITS))
async def test_restart_type_against_exit_reason(
    bus: EventBus, clock: ManualClock, events: Events, restart: str, exit_kind: str
) -> None:
    x, other = Probe("x"), Probe("other")
    async with make(bus, clock, [x.spec(restart=restart), other.spec()]) as sup:
        how, info = EXITS[exit_kind]
        x.run.exit(how, info)
        exited = await events.wait_for("child_exited", child="x")
        assert exited.data["reason"].startswith(REASON[exit_kind])
        abnormal = exit_kind in ("error", "foreign_cancel")
        restarted = restart == "permanent" or (restart == "transient" and abnormal)
        if restarted:
            await events.wait_for("child_started", count=2, child="x")
            assert states(sup) == {"x": "running", "other": "running"}
            assert sup.restarts_in_window() == 1
        else:
            await settle()
            assert x.starts == 1
            assert sup.restarts_in_window() == 0  # exits that are not restarted never count
            if restart == "temporary":
                assert "x" not in states(sup)  # spec deleted
            else:
                assert states(sup)["x"] == "not_running"  # spec kept
                assert sup.which_child("x").last_exit == REASON[exit_kind]
        assert other.starts == 1
        if exit_kind == "error":
            assert exited.data["exception"] == "RuntimeError"
        if exit_kind == "foreign_cancel":
            assert "exception" not in exited.data


async def test_a_temporary_id_can_be_added_again_after_it_ended(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    t = Probe("t")
    async with make(bus, clock, [t.spec(restart="temporary")]) as sup:
        t.run.crash()
        await events.wait_for("child_exited", child="t")
        assert (await sup.start_child(t.spec(restart="temporary"))).running
        with pytest.raises(AlreadyStarted):
            await sup.start_child(t.spec(restart="temporary"))


# ---------------------------------------------------------------------------------------
# §1.4 strategies: crash the first, a middle and the last child


EXPECTED = {
    "one_for_one": {"a": {"a"}, "b": {"b"}, "c": {"c"}},
    "one_for_all": {"a": {"a", "b", "c"}, "b": {"a", "b", "c"}, "c": {"a", "b", "c"}},
    "rest_for_one": {"a": {"a", "b", "c"}, "b": {"b", "c"}, "c": {"c"}},
}


@pytest.mark.parametrize("crashed", ["a", "b", "c"])
@pytest.mark.parametrize("strategy", list(EXPECTED))
async def test_strategy_restarts_the_right_children_in_the_right_order(
    bus: EventBus,
    clock: ManualClock,
    events: Events,
    journal: list[str],
    strategy: Any,
    crashed: str,
) -> None:
    probes = {n: Probe(n, journal) for n in "abc"}
    sup = make(bus, clock, [p.spec() for p in probes.values()], strategy=strategy)
    async with sup:
        journal.clear()
        probes[crashed].run.crash()
        await events.wait_for("restart", child=crashed)
        expected = EXPECTED[strategy][crashed]
        await until(lambda: all(probes[n].starts == 2 for n in expected))
        await settle()
        assert {n for n, p in probes.items() if p.starts == 2} == expected
        assert all(p.starts == 1 for n, p in probes.items() if n not in expected)
        order = sorted(expected)
        bystanders = [n for n in reversed(order) if n != crashed]
        # the crashed child ended first; bystanders are stopped in reverse start order,
        # then the whole group starts in start order
        assert journal == (
            [f"end:{crashed}"] + [f"end:{n}" for n in bystanders] + [f"start:{n}" for n in order]
        )
        assert [(e.data["child"], e.data["cause"]) for e in events.of("child_terminated")] == [
            (n, "group_restart") for n in bystanders
        ]
        restart = events.of("restart")
        assert len(restart) == 1 and restart[0].data["restarts"] == 1  # a group counts once
        assert restart[0].data["group"] == order
        assert all(s == "running" for s in states(sup).values())


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
async def test_temporary_bystanders_are_removed_not_restarted(
    bus: EventBus, clock: ManualClock, events: Events, strategy: Any
) -> None:
    a, t, c = Probe("a"), Probe("t"), Probe("c")
    sup = make(bus, clock, [a.spec(), t.spec(restart="temporary"), c.spec()], strategy=strategy)
    async with sup:
        a.run.crash()
        await events.wait_for("child_started", count=2, child="c")
        assert states(sup) == {"a": "running", "c": "running"}
        assert t.starts == 1


async def test_one_for_all_also_starts_children_that_were_not_running(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """The `tree` case: a child stopped with terminate_child runs again after the group."""
    a, b, tr = Probe("a"), Probe("b"), Probe("tr")
    specs = [a.spec(), b.spec(), tr.spec(restart="transient")]
    async with make(bus, clock, specs, strategy="one_for_all") as sup:
        await sup.terminate_child("b")
        tr.run.exit("normal")
        await events.wait_for("child_exited", child="tr")
        assert states(sup) == {"a": "running", "b": "not_running", "tr": "not_running"}
        a.run.crash()
        await events.wait_for("child_started", count=2, child="tr")
        assert states(sup) == {"a": "running", "b": "running", "tr": "running"}


# ---------------------------------------------------------------------------------------
# §1.5 restart intensity


@pytest.mark.parametrize("limit", [0, 1, 3])
async def test_intensity_exactly_at_the_limit_holds_and_one_over_gives_up(
    bus: EventBus, clock: ManualClock, events: Events, limit: int
) -> None:
    a, b = Probe("a"), Probe("b")
    sup = make(bus, clock, [a.spec(), b.spec()], max_restarts=limit, max_seconds=10)
    await sup.start()
    for n in range(1, limit + 1):  # exactly `limit` restarts, no time passing
        await crash_and_wait(a, events, n)
        await events.wait_for("child_started", count=n + 1, child="a")
    assert sup.status == "running" and sup.restarts_in_window() == limit
    a.run.crash()  # one over
    with pytest.raises(SupervisorGaveUp) as err:
        async with asyncio.timeout(DEADLINE):
            await sup.wait()
    assert (err.value.restarts, err.value.max_restarts, err.value.child) == (limit + 1, limit, "a")
    assert a.starts == limit + 1  # the offending child is not restarted
    gave_up = events.of("max_intensity")[0]
    assert gave_up.severity == Severity.CRITICAL
    assert gave_up.data["restarts"] == limit + 1
    assert events.trail("child_terminated") == [("child_terminated", "b")]
    assert events.of("sup_stopped")[0].data["reason"] == "shutdown:reached_max_restart_intensity"


@pytest.mark.parametrize(("last_at", "gives_up"), [(10.0, True), (10.001, False)])
async def test_the_window_slides_and_includes_its_edge(
    bus: EventBus, clock: ManualClock, events: Events, last_at: float, gives_up: bool
) -> None:
    """D4: float monotonic time; a restart exactly max_seconds old still counts."""
    a = Probe("a")
    sup = make(bus, clock, [a.spec()], max_restarts=2, max_seconds=10)
    await sup.start()
    for n, at in enumerate((0.0, 5.0), start=1):
        clock.advance(at - clock.monotonic())
        await crash_and_wait(a, events, n)
        await events.wait_for("child_started", count=n + 1, child="a")
    clock.advance(last_at - clock.monotonic())
    a.run.crash()
    if gives_up:
        with pytest.raises(SupervisorGaveUp):
            async with asyncio.timeout(DEADLINE):
                await sup.wait()
    else:
        await events.wait_for("child_started", count=4, child="a")
        assert sup.restarts_in_window() == 2  # the t=0 restart slid out
        await sup.stop()


async def test_intensity_is_shared_by_all_children(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    a, b, c = Probe("a"), Probe("b"), Probe("c")
    sup = make(bus, clock, [a.spec(), b.spec(), c.spec()], max_restarts=2, max_seconds=60)
    await sup.start()
    await crash_and_wait(a, events, 1)
    await events.wait_for("child_started", count=2, child="a")
    await crash_and_wait(b, events, 1)
    await events.wait_for("child_started", count=2, child="b")
    c.run.crash()
    with pytest.raises(SupervisorGaveUp, match="child 'c'"):
        async with asyncio.timeout(DEADLINE):
            await sup.wait()


async def test_manual_operations_are_not_counted(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    a, t, tr = Probe("a"), Probe("t"), Probe("tr")
    specs = [a.spec(), t.spec(restart="temporary"), tr.spec(restart="transient")]
    async with make(bus, clock, specs, max_restarts=0) as sup:
        for _ in range(3):
            await sup.terminate_child("a")
            await sup.restart_child("a")
        await sup.start_child(Probe("new").spec())
        t.run.crash()  # temporary: not restarted, not counted
        tr.run.exit("shutdown")  # transient normal-class: not counted
        await events.wait_for("child_exited", child="tr")
        await settle()
        assert sup.status == "running" and sup.restarts_in_window() == 0
        assert events.of("restart") == []


# ---------------------------------------------------------------------------------------
# §1.6 the restart loop


async def test_a_child_failing_at_restart_gets_exactly_n_attempts_then_the_supervisor_gives_up(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    """one_for_one_escalation: intensity 4, the sibling dies with the supervisor."""
    x, sibling = Probe("x", journal), Probe("sibling", journal)
    sup = make(bus, clock, [sibling.spec(), x.spec()], max_restarts=4, max_seconds=60)
    await sup.start()
    x.default = "fail"
    x.run.crash()
    with pytest.raises(SupervisorGaveUp):
        async with asyncio.timeout(DEADLINE):
            await sup.wait()
    assert x.starts == 1 + 4  # the first run, then exactly 4 failed start attempts
    assert len(events.of("child_start_failed", child="x")) == 4
    assert [e.data["restarts"] for e in events.of("restart")] == [1, 2, 3, 4]
    assert journal[-1] == "end:sibling"


async def test_api_calls_are_served_between_restart_attempts(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """hanging_restart_loop (OTP-9549): terminate_child ends the loop."""
    x, other = Probe("x"), Probe("other")
    sup = make(bus, clock, [x.spec(), other.spec()], max_restarts=10_000, max_seconds=60)
    async with sup:
        x.default = "fail"
        x.run.crash()
        await events.wait_for("child_start_failed", count=2, child="x")
        assert sup.which_child("x").state == "restarting"
        await sup.terminate_child("x")
        attempts = x.starts
        await settle()
        assert x.starts == attempts  # the loop is over
        assert states(sup) == {"x": "not_running", "other": "running"}
        assert attempts < 100


async def test_api_results_while_restarting(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x")
    backoff = Backoff(min=30, max=30, jitter=0)
    async with make(bus, clock, [x.spec(backoff=backoff)], max_restarts=5) as sup:
        x.run.crash()
        await events.wait_for("backoff", child="x")
        assert states(sup) == {"x": "restarting"}
        counts = sup.count_children()
        assert (counts.specs, counts.active, counts.workers) == (1, 0, 1)
        with pytest.raises(ChildRestarting, match="'x'"):
            await sup.restart_child("x")
        with pytest.raises(ChildRestarting):
            await sup.delete_child("x")
        with pytest.raises(AlreadyPresent):
            await sup.start_child(x.spec())
        await sup.terminate_child("x")
        assert states(sup) == {"x": "not_running"}
        clock.advance(60)
        await settle()
        assert x.starts == 1  # the pending restart was cancelled
        await sup.delete_child("x")
        assert states(sup) == {}


async def test_one_for_all_retry_terminates_the_freshly_restarted_children_again(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    """one_for_all_other_child_fails_restart."""
    a, b, c = Probe("a", journal), Probe("b", journal), Probe("c", journal)
    sup = make(bus, clock, [a.spec(), b.spec(), c.spec()], strategy="one_for_all", max_restarts=5)
    async with sup:
        b.modes = ["fail"]  # b fails once at the group restart
        c.run.crash()
        await events.wait_for("child_start_failed", child="b")
        await events.wait_for("child_started", count=2, child="c")
        assert c.starts == 2 and b.starts == 3 and a.starts == 3
        # a was restarted, b failed and c stayed unstarted; then the retry stopped the
        # freshly restarted a again and restarted the whole group
        assert journal[-10:] == [
            "end:c",
            "end:b",
            "end:a",
            "start:a",
            "start:b",
            "end:b",
            "end:a",
            "start:a",
            "start:b",
            "start:c",
        ]
        terminated = [(e.data["child"], e.data["reason"]) for e in events.of("child_terminated")]
        assert terminated == [("b", "shutdown"), ("a", "shutdown"), ("a", "shutdown")]
        assert [e.data["restarts"] for e in events.of("restart")] == [1, 2]
        assert all(s == "running" for s in states(sup).values())


async def test_rest_for_one_retry_leaves_the_already_restarted_child_alone(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """rest_for_one_other_child_fails_restart."""
    a, c, x, d = Probe("a"), Probe("c"), Probe("x"), Probe("d")
    sup = make(
        bus,
        clock,
        [a.spec(), c.spec(), x.spec(), d.spec()],
        strategy="rest_for_one",
        max_restarts=5,
    )
    async with sup:
        x.modes = ["fail"]
        c.run.crash()
        await events.wait_for("child_start_failed", child="x")
        await events.wait_for("child_started", count=2, child="d")
        assert (a.starts, c.starts, x.starts, d.starts) == (1, 2, 3, 2)
        assert [e.data["group"] for e in events.of("restart")] == [["c", "x", "d"], ["x", "d"]]


async def test_ignore_at_restart_leaves_the_child_down_after_one_counted_restart(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x")
    async with make(bus, clock, [x.spec()], max_restarts=5) as sup:
        x.modes = ["ignore"]
        x.run.crash()
        await events.wait_for("child_ignored", child="x")
        await settle()
        assert states(sup) == {"x": "not_running"}
        assert sup.restarts_in_window() == 1
        assert events.of("child_start_failed") == []


async def test_a_failing_manual_restart_starts_no_loop_and_counts_nothing(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x")
    async with make(bus, clock, [x.spec()], max_restarts=0) as sup:
        await sup.terminate_child("x")
        x.default = "fail"
        with pytest.raises(StartFailed, match="cannot start"):
            await sup.restart_child("x")
        await settle()
        assert x.starts == 2 and states(sup) == {"x": "not_running"}
        assert sup.restarts_in_window() == 0 and sup.status == "running"


# ---------------------------------------------------------------------------------------
# §1.9 significant children and automatic shutdown


async def test_any_significant_transient_normal_exit_shuts_the_supervisor_down(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    a, lead, c = Probe("a", journal), Probe("lead", journal), Probe("c", journal)
    specs = [a.spec(), lead.spec(restart="transient", significant=True), c.spec()]
    sup = make(bus, clock, specs, auto_shutdown="any_significant")
    await sup.start()
    lead.run.crash()  # abnormal: just restarted (and counted)
    await events.wait_for("child_started", count=2, child="lead")
    assert sup.status == "running"
    lead.run.exit("normal")
    async with asyncio.timeout(DEADLINE):
        reason = await sup.wait()
    assert str(reason) == "shutdown:auto_shutdown"
    assert events.of("auto_shutdown")[0].data == {"child": "lead", "mode": "any_significant"}
    assert journal[-2:] == ["end:c", "end:a"]


@pytest.mark.parametrize("how", ["normal", "crash"])
async def test_a_temporary_significant_child_triggers_on_any_exit(
    bus: EventBus, clock: ManualClock, how: str
) -> None:
    t = Probe("t")
    sup = make(
        bus, clock, [t.spec(restart="temporary", significant=True)], auto_shutdown="any_significant"
    )
    await sup.start()
    t.run.exit(how)
    async with asyncio.timeout(DEADLINE):
        assert str(await sup.wait()) == "shutdown:auto_shutdown"


async def test_all_significant_waits_for_the_last_running_significant_child(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    s1, s2, s3, w = Probe("s1"), Probe("s2"), Probe("s3"), Probe("w")
    specs = [
        s1.spec(restart="temporary", significant=True),
        s2.spec(restart="transient", significant=True),
        s3.spec(restart="transient", significant=True),
        w.spec(),
    ]
    sup = make(bus, clock, specs, auto_shutdown="all_significant")
    await sup.start()
    await sup.terminate_child("s3")  # not a trigger, but no longer running
    s1.run.exit("normal")
    await events.wait_for("child_exited", child="s1")
    await settle()
    assert sup.status == "running"
    s2.run.exit("shutdown")
    async with asyncio.timeout(DEADLINE):
        assert str(await sup.wait()) == "shutdown:auto_shutdown"


async def test_terminate_child_and_bystanders_never_trigger_auto_shutdown(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    a, s = Probe("a"), Probe("s")
    specs = [a.spec(), s.spec(restart="transient", significant=True)]
    sup = make(bus, clock, specs, strategy="one_for_all", auto_shutdown="any_significant")
    async with sup:
        a.run.crash()  # s is a bystander of the group restart
        await events.wait_for("child_started", count=2, child="s")
        await sup.terminate_child("s")
        await settle()
        assert sup.status == "running" and events.of("auto_shutdown") == []


@pytest.mark.parametrize("significant", [True, False])
async def test_auto_shutdown_escalates_through_significant_sub_supervisors(
    bus: EventBus, clock: ManualClock, events: Events, significant: bool
) -> None:
    lead, other = Probe("lead"), Probe("other")
    b = Supervisor(
        "b", [lead.spec(restart="transient", significant=True)], auto_shutdown="any_significant"
    )
    sup = make(
        bus,
        clock,
        [other.spec(), b.child_spec(restart="transient", significant=significant)],
        auto_shutdown="any_significant",
    )
    await sup.start()
    lead.run.exit("normal")
    if significant:
        async with asyncio.timeout(DEADLINE):
            assert str(await sup.wait()) == "shutdown:auto_shutdown"
        assert [e.source for e in events.of("auto_shutdown")] == ["sup/b", "sup"]
    else:
        await events.wait_for("child_exited", child="b")
        await settle()
        assert sup.status == "running" and states(sup) == {"other": "running", "b": "not_running"}
        await sup.stop()


# ---------------------------------------------------------------------------------------
# Backoff (D8, an extension)


async def test_backoff_delays_with_a_seeded_random_source(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x")
    backoff = Backoff(min=1, max=10, factor=2, jitter=0.5, reset_after=100)
    expected_rng = random.Random(42)
    expected = [backoff.delay(n, expected_rng.random()) for n in range(5)]
    sup = make(
        bus,
        clock,
        [x.spec(backoff=backoff)],
        max_restarts=10,
        max_seconds=1000,
        random=random.Random(42).random,
    )
    async with sup:
        for n, delay in enumerate(expected, start=1):
            x.run.crash()
            event = await events.wait_for("backoff", count=n, child="x")
            assert event.data["delay"] == pytest.approx(delay)
            await until(lambda: clock.sleepers == 1)
            clock.advance(delay * 0.999)
            await settle()
            assert x.starts == n  # not yet
            assert sup.which_child("x").state == "restarting"
            assert len(events.of("restart")) == n - 1  # counted when the attempt is made
            clock.advance(delay * 0.001 + 1e-9)
            await events.wait_for("child_started", count=n + 1, child="x")
        assert [round(d, 6) for d in expected] == [
            round(e.data["delay"], 6) for e in events.of("backoff")
        ]


async def test_backoff_resets_after_the_child_ran_long_enough(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x")
    backoff = Backoff(min=1, max=100, factor=2, jitter=0, reset_after=30)
    async with make(bus, clock, [x.spec(backoff=backoff)], max_restarts=10, max_seconds=10) as sup:
        for n, delay in enumerate([1, 2], start=1):
            x.run.crash()
            await events.wait_for("backoff", count=n, child="x")
            await until(lambda: clock.sleepers == 1)
            clock.advance(delay)
            await events.wait_for("child_started", count=n + 1, child="x")
        clock.advance(30)  # ran 30 s: the next crash is a fresh start
        x.run.crash()
        event = await events.wait_for("backoff", count=3, child="x")
        assert event.data["delay"] == 1
        assert sup.status == "running"


async def test_a_child_failing_to_start_backs_off_between_attempts(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x")
    backoff = Backoff(min=1, max=100, factor=3, jitter=0)
    sup = make(bus, clock, [x.spec(backoff=backoff)], max_restarts=3, max_seconds=1000)
    await sup.start()
    x.default = "fail"
    x.run.crash()
    for n, delay in enumerate([1, 3, 9], start=1):
        await events.wait_for("backoff", count=n, child="x")
        await until(lambda: clock.sleepers == 1)
        clock.advance(delay)
        await events.wait_for("child_start_failed", count=n, child="x")
    await events.wait_for("backoff", count=4, child="x")
    await until(lambda: clock.sleepers == 1)
    clock.advance(27)
    with pytest.raises(SupervisorGaveUp):
        async with asyncio.timeout(DEADLINE):
            await sup.wait()
    assert x.starts == 4


async def test_a_group_backs_off_once_driven_by_the_crashed_child(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    a, b = Probe("a", journal), Probe("b", journal)
    specs = [a.spec(), b.spec(backoff=Backoff(min=5, max=5, jitter=0))]
    async with make(bus, clock, specs, strategy="one_for_all") as sup:
        journal.clear()
        b.run.crash()
        await events.wait_for("backoff", child="b")
        assert journal == ["end:b", "end:a"]  # the group is down during the delay
        assert states(sup) == {"a": "not_running", "b": "restarting"}
        await until(lambda: clock.sleepers == 1)
        clock.advance(5)
        await events.wait_for("child_started", count=2, child="b")
        assert journal[2:] == ["start:a", "start:b"]
        assert len(events.of("restart")) == 1


async def test_stopping_during_a_backoff_delay_cancels_it(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x")
    sup = make(bus, clock, [x.spec(backoff=Backoff(min=50, max=50))])
    await sup.start()
    x.run.crash()
    await events.wait_for("backoff", child="x")
    async with asyncio.timeout(DEADLINE):
        await sup.stop()
    clock.advance(100)
    await settle()
    assert x.starts == 1


# ---------------------------------------------------------------------------------------
# More OTP behaviour


async def test_a_child_added_later_is_in_the_rest_for_rest_for_one(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    a, b, c = Probe("a"), Probe("b"), Probe("c")
    async with make(bus, clock, [a.spec(), b.spec()], strategy="rest_for_one") as sup:
        await sup.start_child(c.spec())
        b.run.crash()
        await events.wait_for("child_started", count=2, child="c")
        assert (a.starts, b.starts, c.starts) == (1, 2, 2)
        assert events.of("restart")[0].data["group"] == ["b", "c"]


async def test_the_supervisor_can_be_stopped_while_a_restart_loop_runs(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x, y = Probe("x"), Probe("y")
    sup = make(bus, clock, [x.spec(), y.spec()], max_restarts=10_000)
    await sup.start()
    x.default = "fail"
    x.run.crash()
    await events.wait_for("child_start_failed", count=3, child="x")
    async with asyncio.timeout(DEADLINE):
        await sup.stop()
    assert str(await sup.wait()) == "shutdown"
    assert events.of("child_terminated", child="y")[0].data["reason"] == "shutdown"


# ---------------------------------------------------------------------------------------
# Further OTP scenarios (audit): cases beyond the list, against supervisor.erl


@pytest.mark.parametrize("restart", ["temporary", "transient"])
async def test_rest_for_one_later_temporary_or_stopped_siblings(
    bus: EventBus, clock: ManualClock, events: Events, restart: str
) -> None:
    """rest_for_one: a temporary child after the crashed one is removed; one before it is
    untouched; a non-temporary later child that was down is started with the group.
    """
    t0, a, t1, b = Probe("t0"), Probe("a"), Probe("t1"), Probe("b")
    specs = [t0.spec(restart="temporary"), a.spec(), t1.spec(restart=restart), b.spec()]
    async with make(bus, clock, specs, strategy="rest_for_one") as sup:
        if restart == "transient":
            t1.run.exit("normal")  # down, spec kept: the group restart starts it again
            await events.wait_for("child_exited", child="t1")
        a.run.crash()
        await events.wait_for("child_started", count=2, child="b")
        await settle()
        assert t0.starts == 1 and a.starts == 2
        if restart == "temporary":
            assert states(sup) == {"t0": "running", "a": "running", "b": "running"}
            assert t1.starts == 1
        else:
            assert states(sup) == {"t0": "running", "a": "running", "t1": "running", "b": "running"}
            assert t1.starts == 2
        assert sup.restarts_in_window() == 1


@pytest.mark.parametrize("how", ["normal", "shutdown", "shutdown_info"])
async def test_one_for_all_transient_normal_exit_restarts_nobody(
    bus: EventBus, clock: ManualClock, events: Events, how: str
) -> None:
    a, tr, c = Probe("a"), Probe("tr"), Probe("c")
    specs = [a.spec(), tr.spec(restart="transient"), c.spec()]
    async with make(bus, clock, specs, strategy="one_for_all", max_restarts=0) as sup:
        tr.run.exit(*EXITS[how])
        await events.wait_for("child_exited", child="tr")
        await settle()
        assert (a.starts, tr.starts, c.starts) == (1, 1, 1)
        assert states(sup) == {"a": "running", "tr": "not_running", "c": "running"}
        assert events.of("restart") == [] and sup.status == "running"


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
async def test_a_crashing_temporary_child_is_removed_without_a_group_restart(
    bus: EventBus, clock: ManualClock, events: Events, strategy: Any
) -> None:
    a, t, c = Probe("a"), Probe("t"), Probe("c")
    specs = [a.spec(), t.spec(restart="temporary"), c.spec()]
    async with make(bus, clock, specs, strategy=strategy, max_restarts=0) as sup:
        t.run.crash()
        await events.wait_for("child_exited", child="t")
        await settle()
        assert (a.starts, t.starts, c.starts) == (1, 1, 1)
        assert states(sup) == {"a": "running", "c": "running"}
        assert events.of("restart") == [] and sup.status == "running"


@pytest.mark.parametrize("how", ["normal", "shutdown", "shutdown_info"])
async def test_any_significant_transient_normal_class_exit_shuts_down(
    bus: EventBus, clock: ManualClock, events: Events, how: str
) -> None:
    """OTP: the supervisor exits `shutdown` (a normal-class reason for its parent)."""
    lead, w = Probe("lead"), Probe("w")
    specs = [w.spec(), lead.spec(restart="transient", significant=True)]
    inner = Supervisor("inner", specs, auto_shutdown="any_significant")
    outer_w = Probe("outer_w")
    outer = make(bus, clock, [outer_w.spec(), inner.child_spec(restart="transient")])
    async with outer:
        lead.run.exit(*EXITS[how])
        exited = await events.wait_for("child_exited", child="inner")
        assert exited.data["action"] == "none"  # normal class: transient parent leaves it
        assert exited.data["reason"].startswith("shutdown")
        assert states(outer) == {"outer_w": "running", "inner": "not_running"}
        assert outer.restarts_in_window() == 0


async def test_max_restarts_zero_gives_up_at_the_first_crash(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    a, b, c = Probe("a", journal), Probe("b", journal), Probe("c", journal)
    sup = make(bus, clock, [a.spec(), b.spec(), c.spec()], max_restarts=0)
    await sup.start()
    b.run.crash()
    with pytest.raises(SupervisorGaveUp):
        async with asyncio.timeout(DEADLINE):
            await sup.wait()
    assert b.starts == 1
    assert journal[-3:] == ["end:b", "end:c", "end:a"]


async def test_the_window_slides_continuously(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """At most 2 in 10 s: crashes at 0, 6, 12, 18, 24 never have 3 within 10 s."""
    a = Probe("a")
    sup = make(bus, clock, [a.spec()], max_restarts=2, max_seconds=10)
    async with sup:
        for n, at in enumerate((0.0, 6.0, 12.0, 18.0, 24.0), start=1):
            clock.advance(at - clock.monotonic())
            await crash_and_wait(a, events, n)
            await events.wait_for("child_started", count=n + 1, child="a")
            assert sup.restarts_in_window() == min(n, 2)
        # now restarts at 18 and 24: one at 28 makes three within 10 s (18 is 10 s old)
        clock.advance(28.0 - clock.monotonic())
        a.run.crash()
        with pytest.raises(SupervisorGaveUp):
            async with asyncio.timeout(DEADLINE):
                await sup.wait()


async def test_a_permanent_child_exiting_normally_is_restarted_and_counted(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    a = Probe("a")
    sup = make(bus, clock, [a.spec()], max_restarts=1)
    await sup.start()
    a.run.exit("normal")
    await events.wait_for("child_started", count=2, child="a")
    assert sup.restarts_in_window() == 1
    a.run.exit("shutdown", "bye")
    with pytest.raises(SupervisorGaveUp):
        async with asyncio.timeout(DEADLINE):
            await sup.wait()


async def test_a_bystander_failing_while_stopped_by_a_group_restart_is_restarted_with_it(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """shutdown_error during a group restart: reported, the group restart goes on, and the
    bystander's own exit is not a second (counted) restart.
    """
    a, b, c = Probe("a"), Probe("b", on_stop="error"), Probe("c")
    sup = make(bus, clock, [a.spec(), b.spec(), c.spec()], strategy="one_for_all", max_restarts=1)
    async with sup:
        a.run.crash()
        await events.wait_for("child_started", count=2, child="c")
        await settle()
        assert (a.starts, b.starts, c.starts) == (2, 2, 2)
        assert sup.restarts_in_window() == 1 and len(events.of("restart")) == 1
        stopped_b = events.of("child_terminated", child="b")[0]
        assert stopped_b.data["reason"].startswith("error:ValueError")
        assert all(s == "running" for s in states(sup).values())


# ---------------------------------------------------------------------------------------
# OTP scenarios (checker pass): behaviour of §1 the tests above did not exercise


async def test_one_for_all_crashed_child_is_not_left_restarting_when_a_sibling_fails(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """§1.6 one_for_all: the crashed child's record is reset (OTP del_child: pid undefined);
    only the child that failed to start is `restarting`. Ending that loop with
    terminate_child leaves the crashed child stopped — not stuck in a loop that no longer
    runs — so restart_child brings it back.
    """
    a, b, c = Probe("a"), Probe("b"), Probe("c")
    slow = Backoff(min=30, max=30, jitter=0)  # holds b's loop between attempts
    specs = [a.spec(), b.spec(backoff=slow), c.spec()]
    async with make(bus, clock, specs, strategy="one_for_all", max_restarts=5) as sup:
        b.default = "fail"
        c.run.crash()
        await events.wait_for("child_start_failed", child="b")
        await events.wait_for("backoff", child="b")
        assert sup.which_child("b").state == "restarting"
        assert sup.which_child("c").state == "not_running"  # never reached: c comes after b
        await sup.terminate_child("b")  # ends the loop
        await settle()
        assert states(sup) == {"a": "running", "b": "not_running", "c": "not_running"}
        assert (await sup.restart_child("c")).running
        assert states(sup)["c"] == "running" and c.starts == 2


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
async def test_a_sibling_failing_every_group_restart_gets_exactly_n_attempts(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str], strategy: Any
) -> None:
    """one_for_all_escalation / rest_for_one_escalation: every group retry is counted, so
    with intensity N the failing sibling gets N start attempts, then the supervisor gives up
    and stops the rest in reverse start order.
    """
    a, b, x = Probe("a", journal), Probe("b", journal), Probe("x", journal)
    sup = make(bus, clock, [a.spec(), b.spec(), x.spec()], strategy=strategy, max_restarts=3)
    await sup.start()
    x.default = "fail"
    b.run.crash()
    with pytest.raises(SupervisorGaveUp, match="child 'x'"):
        async with asyncio.timeout(DEADLINE):
            await sup.wait()
    assert x.starts == 1 + 3
    assert len(events.of("child_start_failed", child="x")) == 3
    assert [e.data["restarts"] for e in events.of("restart")] == [1, 2, 3]
    # one_for_all retries restart a as well; rest_for_one never touches a
    assert a.starts == (1 + 3 if strategy == "one_for_all" else 1)
    assert journal[-2:] == ["end:b", "end:a"]


@pytest.mark.parametrize("how", ["normal", "shutdown", "shutdown_info"])
async def test_one_for_all_permanent_child_exiting_normal_class_restarts_all(
    bus: EventBus, clock: ManualClock, events: Events, how: str
) -> None:
    """§1.3 × §1.4: a permanent child is restarted whatever the reason, with its group."""
    a, b, c = Probe("a"), Probe("b"), Probe("c")
    sup = make(bus, clock, [a.spec(), b.spec(), c.spec()], strategy="one_for_all")
    async with sup:
        b.run.exit(*EXITS[how])
        await until(lambda: (a.starts, b.starts, c.starts) == (2, 2, 2))
        await events.wait_for("child_started", count=2, child="c")
        assert sup.restarts_in_window() == 1
        assert events.of("restart")[0].data["group"] == ["a", "b", "c"]


@pytest.mark.parametrize("mode", ["any_significant", "all_significant"])
@pytest.mark.parametrize("restart", ["transient", "temporary"])
@pytest.mark.parametrize("how", ["normal", "shutdown_info", "error"])
async def test_non_significant_children_never_trigger_auto_shutdown(
    bus: EventBus, clock: ManualClock, events: Events, mode: Any, restart: str, how: str
) -> None:
    """nonsignificant_temporary / nonsignificant_transient."""
    n, s = Probe("n"), Probe("s")
    specs = [n.spec(restart=restart), s.spec(restart="transient", significant=True)]
    async with make(bus, clock, specs, auto_shutdown=mode) as sup:
        n.run.exit(*EXITS[how])
        await events.wait_for("child_exited", child="n")
        await settle()
        assert sup.status == "running" and events.of("auto_shutdown") == []
        assert states(sup)["s"] == "running"


@pytest.mark.parametrize("mode", ["any_significant", "all_significant"])
async def test_rest_for_one_significant_bystanders_never_trigger_auto_shutdown(
    bus: EventBus, clock: ManualClock, events: Events, mode: Any
) -> None:
    """significant_bystander under rest_for_one: a significant temporary child stopped (and
    removed) by a group restart, and a significant transient one stopped and restarted.
    """
    a, tr, tm = Probe("a"), Probe("tr"), Probe("tm")
    specs = [
        a.spec(),
        tr.spec(restart="transient", significant=True),
        tm.spec(restart="temporary", significant=True),
    ]
    async with make(bus, clock, specs, strategy="rest_for_one", auto_shutdown=mode) as sup:
        a.run.crash()
        await events.wait_for("child_started", count=2, child="tr")
        await settle()
        assert sup.status == "running" and events.of("auto_shutdown") == []
        assert states(sup) == {"a": "running", "tr": "running"}


async def test_all_significant_a_restarting_significant_child_still_counts_as_running(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """§1.9: 'running' means a pid that is not undefined; {restarting, _} is running."""
    s1, s2 = Probe("s1"), Probe("s2")
    specs = [
        s1.spec(restart="transient", significant=True, backoff=Backoff(min=30, max=30, jitter=0)),
        s2.spec(restart="transient", significant=True),
    ]
    async with make(bus, clock, specs, auto_shutdown="all_significant", max_restarts=5) as sup:
        s1.run.crash()  # abnormal: restarted (after a delay), and counted
        await events.wait_for("backoff", child="s1")
        s2.run.exit("normal")
        await events.wait_for("child_exited", child="s2")
        await settle()
        assert sup.status == "running" and events.of("auto_shutdown") == []
        assert states(sup) == {"s1": "restarting", "s2": "not_running"}
        await until(lambda: clock.sleepers == 1)
        clock.advance(30)
        await events.wait_for("child_started", count=2, child="s1")
        s1.run.exit("shutdown")  # now the last running significant child ends by itself
        async with asyncio.timeout(DEADLINE):
            assert str(await sup.wait()) == "shutdown:auto_shutdown"


async def test_a_significant_child_crashing_past_the_intensity_gives_up_not_auto_shuts_down(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """significant_transient: abnormal exits are restarts, and restarts are counted."""
    s = Probe("s")
    specs = [s.spec(restart="transient", significant=True)]
    sup = make(bus, clock, specs, auto_shutdown="any_significant", max_restarts=1)
    await sup.start()
    await crash_and_wait(s, events, 1)
    await events.wait_for("child_started", count=2, child="s")
    s.run.crash()
    with pytest.raises(SupervisorGaveUp):
        async with asyncio.timeout(DEADLINE):
            await sup.wait()
    assert events.of("auto_shutdown") == []


async def test_a_child_added_later_is_stopped_first_and_started_last_in_a_group(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    """§1.2: start_child places the child after all existing ones, in every respect."""
    a, b, late = Probe("a", journal), Probe("b", journal), Probe("late", journal)
    sup = make(bus, clock, [a.spec(), b.spec()], strategy="one_for_all")
    await sup.start()
    await sup.start_child(late.spec())
    journal.clear()
    a.run.crash()
    await events.wait_for("child_started", count=2, child="late")
    assert journal == ["end:a", "end:late", "end:b", "start:a", "start:b", "start:late"]
    journal.clear()
    await sup.stop()
    assert journal == ["end:late", "end:b", "end:a"]


async def test_one_for_all_starts_a_child_that_answered_ignore(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """§1.4: a non-temporary child whose start returned ignore is started by the group."""
    a, lazy = Probe("a"), Probe("lazy", modes=("ignore",))
    async with make(bus, clock, [a.spec(), lazy.spec()], strategy="one_for_all") as sup:
        assert states(sup) == {"a": "running", "lazy": "not_running"}
        a.run.crash()
        await events.wait_for("child_started", child="lazy")
        assert states(sup) == {"a": "running", "lazy": "running"}


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
async def test_a_significant_transient_normal_exit_shuts_down_without_a_group_restart(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str], strategy: Any
) -> None:
    """§1.9 × §1.4: a normal exit of a transient child is no restart (no group), but a
    significant one ends the supervisor; the others stop in reverse start order.
    """
    a, s, c = Probe("a", journal), Probe("s", journal), Probe("c", journal)
    specs = [a.spec(), s.spec(restart="transient", significant=True), c.spec()]
    sup = make(bus, clock, specs, strategy=strategy, auto_shutdown="any_significant")
    await sup.start()
    s.run.exit("normal")
    async with asyncio.timeout(DEADLINE):
        assert str(await sup.wait()) == "shutdown:auto_shutdown"
    assert events.of("restart") == [] and (a.starts, s.starts, c.starts) == (1, 1, 1)
    assert journal[-3:] == ["end:s", "end:c", "end:a"]
