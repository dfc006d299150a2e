"""The shutdown protocol (companyd.supervision._shutdown) against §1.7 and D2.

Every test runs real children (asyncio tasks) under a real Supervisor, with a ManualClock for
every window, timeout and delay, so nothing here sleeps for real except for a few loop
iterations. Section numbers refer to §1 of ../shared/reference/otp-supervisor.md; the test
kit is in supkit.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus, Severity
from companyd.supervision import BRUTAL_KILL, INFINITY, Supervisor

from .supkit import DEADLINE, Events, Probe, dynamic, make, settle, states, until

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------------------------------
# §1.7 shutdown


async def test_a_child_ignoring_the_stop_request_is_cancelled_after_its_shutdown_time(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x", on_stop="ignore")
    sup = make(bus, clock, [x.spec(shutdown=10)])
    await sup.start()
    stopping = asyncio.ensure_future(sup.stop())
    await until(lambda: x.run.stop_seen and clock.sleepers == 1)
    clock.advance(9.9)
    await settle()
    assert not stopping.done()
    clock.advance(0.1)
    async with asyncio.timeout(DEADLINE):
        await stopping
    terminated = events.of("child_terminated", child="x")[0]
    # issue 15 #21: cancelled once its shutdown time ran out is a kill, as in OTP
    assert (terminated.data["reason"], terminated.data["stop"]) == ("killed", "cancelled")


async def test_a_child_swallowing_cancellation_is_abandoned_after_shutdown_plus_grace(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    """D2: the supervisor never blocks longer than shutdown + kill_grace on one child."""
    a, x = Probe("a", journal), Probe("x", journal, on_stop="swallow")
    sup = make(bus, clock, [a.spec(), x.spec(shutdown=5)], kill_grace=1.0)
    await sup.start()
    stopping = asyncio.ensure_future(sup.stop())
    await until(lambda: x.run.stop_seen and clock.sleepers == 1)
    clock.advance(5)  # shutdown time over: cancel
    await until(lambda: x.run.cancels == 1 and clock.sleepers == 2)
    clock.advance(0.5)  # half the grace: cancelled again
    await until(lambda: x.run.cancels == 2)
    assert not stopping.done()
    clock.advance(0.5)  # grace over: abandoned
    async with asyncio.timeout(DEADLINE):
        await stopping
    kill_failed = events.of("child_kill_failed", child="x")[0]
    assert kill_failed.severity == Severity.WARNING
    terminated = events.of("child_terminated", child="x")[0]
    assert (terminated.data["reason"], terminated.data["stop"]) == ("killed", "abandoned")
    assert journal[-1] == "end:a"  # the sequence went on
    assert "end:x" not in journal  # it is still running, detached
    x.release()
    await until(lambda: "end:x" in journal)


async def test_brutal_kill_cancels_at_once_with_reason_killed(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x", on_stop="ignore")
    sup = make(bus, clock, [x.spec(shutdown=BRUTAL_KILL)])
    await sup.start()
    async with asyncio.timeout(DEADLINE):
        await sup.stop()
    terminated = events.of("child_terminated", child="x")[0]
    assert (terminated.data["reason"], terminated.data["stop"]) == ("killed", "brutal_kill")
    assert not x.run.stop_seen  # cancelled at once: it never got to see the request


async def test_infinity_waits_for_the_child_however_long_it_takes(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x", on_stop="swallow")
    sup = make(bus, clock, [x.spec(shutdown=INFINITY)], kill_grace=0.1)
    await sup.start()
    stopping = asyncio.ensure_future(sup.stop())
    await until(lambda: x.run.stop_seen)
    clock.advance(10_000)
    await settle()
    assert not stopping.done() and x.run.cancels == 0
    x.release()
    async with asyncio.timeout(DEADLINE):
        await stopping
    assert events.of("child_terminated", child="x")[0].data["stop"] == "graceful"


async def test_shutdown_zero_cancels_after_one_tick(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x", on_stop="ignore")
    sup = make(bus, clock, [x.spec(shutdown=0)])
    await sup.start()
    async with asyncio.timeout(DEADLINE):
        await sup.stop()
    assert events.of("child_terminated", child="x")[0].data["stop"] == "cancelled"


async def test_an_error_while_stopping_is_reported_and_the_sequence_continues(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    a, b = Probe("a", journal), Probe("b", journal, on_stop="error")
    sup = make(bus, clock, [a.spec(), b.spec()])
    await sup.start()
    await sup.stop()
    reasons = {e.data["child"]: e.data["reason"] for e in events.of("child_terminated")}
    assert reasons == {"a": "shutdown", "b": "error:ValueError('b broke while stopping')"}
    assert journal[-1] == "end:a"


async def test_children_exiting_during_shutdown_keep_their_reason_and_are_not_restarted(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """sup_stop_race: the stop request is queued before a's exit is."""
    a, b = Probe("a"), Probe("b")
    sup = make(bus, clock, [a.spec(), b.spec()])
    await sup.start()
    a.run.crash()
    stopping = asyncio.ensure_future(sup.stop())
    async with asyncio.timeout(DEADLINE):
        await stopping
    assert events.of("restart") == []
    reasons = {e.data["child"]: e.data["reason"] for e in events.of("child_terminated")}
    assert reasons["a"] == "error:RuntimeError('a crashed')"


async def test_cancelling_the_supervisor_cancels_its_children_without_waiting(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    a = Probe("a", journal, on_stop="ignore")
    outer_ready: asyncio.Future[Supervisor] = asyncio.get_running_loop().create_future()
    sup = make(bus, clock, [a.spec(shutdown=INFINITY)])

    class Ctx:
        id = "sup"
        path = "top/sup"
        stopping = asyncio.Event()

        def started(self, info: Any = None) -> None:
            outer_ready.set_result(info)

    task = asyncio.ensure_future(sup.as_child()(Ctx()))
    async with asyncio.timeout(DEADLINE):
        assert await outer_ready is sup
    assert sup.path == "top/sup"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(DEADLINE):
            await task
    await until(lambda: "end:a" in journal)
    assert events.of("sup_stopped")[0].data["reason"] == "killed"


# ---------------------------------------------------------------------------------------
# §1.8 nested supervisors and escalation


async def test_nested_supervisors_stop_depth_first_in_reverse_order(
    bus: EventBus, clock: ManualClock, journal: list[str]
) -> None:
    a, b, c, d = (Probe(n, journal) for n in "abcd")
    sub = Supervisor("sub", [b.spec(), c.spec()])
    sup = make(bus, clock, [a.spec(), sub.child_spec(), d.spec()])
    await sup.start()
    await sup.stop()
    assert journal == [
        "start:a",
        "start:b",
        "start:c",
        "start:d",
        "end:d",
        "end:c",
        "end:b",
        "end:a",
    ]


# ---------------------------------------------------------------------------------------
# §1.10 admin API


async def test_dynamic_shutdown_stops_every_instance_at_once(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """One shutdown timer for the whole group: one clock step stops all three."""
    worker = Probe("job", on_stop="ignore")
    sup = dynamic(bus, clock, worker.spec(shutdown=10))
    await sup.start()
    for _ in range(3):
        await sup.start_instance()
    stopping = asyncio.ensure_future(sup.stop())
    await until(lambda: all(r.stop_seen for r in worker.runs) and clock.sleepers == 3)
    clock.advance(10)
    async with asyncio.timeout(DEADLINE):
        await stopping
    assert len(events.of("child_terminated", stop="cancelled")) == 3


# ---------------------------------------------------------------------------------------
# Further OTP scenarios (audit): cases beyond the list, against supervisor.erl


async def test_a_supervisor_child_with_infinity_shutdown_finishes_its_own_ordered_stop(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    slow, x = Probe("slow", journal, on_stop="swallow"), Probe("x", journal)
    inner = Supervisor("inner", [x.spec(), slow.spec(shutdown=INFINITY)])
    spec = inner.child_spec()
    assert spec.shutdown == INFINITY
    w = Probe("w", journal)
    sup = make(bus, clock, [w.spec(), spec], kill_grace=0.1)
    await sup.start()
    stopping = asyncio.ensure_future(sup.stop())
    await until(lambda: slow.run.stop_seen)
    clock.advance(10_000)
    await settle()
    assert not stopping.done()
    slow.release()
    async with asyncio.timeout(DEADLINE):
        await stopping
    assert journal[-3:] == ["end:slow", "end:x", "end:w"]
    assert events.of("child_kill_failed") == []


# ---------------------------------------------------------------------------------------
# OTP scenarios (checker pass): behaviour of §1 the tests above did not exercise


async def test_static_shutdown_timers_run_one_child_after_another(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    """§1.7: static children stop one at a time, so the total time is the sum."""
    a, b = Probe("a", journal, on_stop="ignore"), Probe("b", journal, on_stop="ignore")
    sup = make(bus, clock, [a.spec(shutdown=3), b.spec(shutdown=5)])
    await sup.start()
    stopping = asyncio.ensure_future(sup.stop())
    await until(lambda: b.run.stop_seen and clock.sleepers == 1)
    assert not a.run.stop_seen  # a is asked only once b is gone
    clock.advance(5)
    await until(lambda: a.run.stop_seen and clock.sleepers == 1)
    assert journal[-1] == "end:b"
    clock.advance(2.9)
    await settle()
    assert not stopping.done()
    clock.advance(0.1)
    async with asyncio.timeout(DEADLINE):
        await stopping
    assert journal[-2:] == ["end:b", "end:a"]
    assert [e.data["stop"] for e in events.of("child_terminated")] == ["cancelled", "cancelled"]


async def test_a_child_returning_when_cancelled_after_its_shutdown_time_is_still_killed(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """OTP's ``exit(Child, kill)`` after the timeout cannot be answered: whatever the child
    does with the cancellation (here: swallows it and returns), its reason is ``killed``.
    """
    x = Probe("x", on_stop="swallow")
    async with make(bus, clock, [x.spec(shutdown=2, restart="transient")]) as sup:
        terminating = asyncio.ensure_future(sup.terminate_child("x"))
        await until(lambda: x.run.stop_seen and clock.sleepers == 1)
        clock.advance(2)  # shutdown time over: cancelled
        await until(lambda: x.run.cancels == 1)
        x.release()  # it caught the cancellation and now returns normally
        async with asyncio.timeout(DEADLINE):
            await terminating
        terminated = events.of("child_terminated", child="x")[0]
        assert (terminated.data["reason"], terminated.data["stop"]) == ("killed", "cancelled")
        assert sup.which_child("x").last_exit == "killed"


async def test_terminate_child_applies_brutal_kill(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x", on_stop="ignore")
    async with make(bus, clock, [x.spec(shutdown=BRUTAL_KILL)]) as sup:
        await sup.terminate_child("x")
        terminated = events.of("child_terminated", child="x")[0]
        assert (terminated.data["reason"], terminated.data["stop"]) == ("killed", "brutal_kill")
        assert states(sup) == {"x": "not_running"} and events.of("restart") == []


async def test_dynamic_brutal_kill_instances_are_all_killed_at_shutdown(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """sup_stop_brutal_kill_dynamic."""
    worker = Probe("job", on_stop="ignore")
    sup = dynamic(bus, clock, worker.spec(shutdown=BRUTAL_KILL))
    await sup.start()
    for _ in range(4):
        await sup.start_instance()
    async with asyncio.timeout(DEADLINE):
        await sup.stop()
    terminated = events.of("child_terminated")
    assert len(terminated) == 4
    assert {(e.data["reason"], e.data["stop"]) for e in terminated} == {("killed", "brutal_kill")}
    assert not any(r.stop_seen for r in worker.runs)
