"""The supervisor process (companyd.supervision._supervisor) against OTP's rules: life as a
root or a child, nesting and escalation (§1.8), the command queue, events.

Every test runs real children (asyncio tasks) under a real Supervisor, with a ManualClock for
every window, timeout and delay, so nothing here sleeps for real except for a few loop
iterations. Section numbers refer to §1 of ../shared/reference/otp-supervisor.md; the test
kit is in supkit.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus, Severity
from companyd.supervision import (
    Backoff,
    Supervisor,
    SupervisorError,
    SupervisorGaveUp,
    SupervisorNotRunning,
)

from .supkit import DEADLINE, Events, Probe, make, settle, states, until

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------------------------------
# §1.8 nested supervisors and escalation


async def test_escalation_across_three_levels_reaches_the_owner(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    w, bystander = Probe("w"), Probe("bystander")
    leaf = Supervisor("leaf", [w.spec()], max_restarts=1, max_seconds=60)
    mid = Supervisor("mid", [leaf.child_spec()], max_restarts=1, max_seconds=60)
    root = make(bus, clock, [bystander.spec(), mid.child_spec()], max_restarts=1, max_seconds=60)
    await root.start()
    assert leaf.path == "sup/mid/leaf"
    # Every level allows 1 restart: the leaf's worker can crash 2 × 2 × 2 = 8 times (the
    # product of the intensities on the path, sup_princ.md) before the root gives up.
    for crash in range(1, 8):
        w.run.crash()
        await events.wait_for("child_started", count=crash + 1, child="w")
    w.run.crash()
    with pytest.raises(SupervisorGaveUp) as err:
        async with asyncio.timeout(DEADLINE):
            await root.wait()
    assert err.value.path == "sup" and err.value.child == "mid"
    assert err.value.exit_code == 1  # docs/daemon.md: the root gave up → exit 1, restarted
    gave_up = [(e.source, e.data["child"]) for e in events.of("max_intensity")]
    assert gave_up == [
        ("sup/mid/leaf", "w"),
        ("sup/mid/leaf", "w"),
        ("sup/mid", "leaf"),
        ("sup/mid/leaf", "w"),
        ("sup/mid/leaf", "w"),
        ("sup/mid", "leaf"),
        ("sup", "mid"),
    ]
    assert w.starts == 8
    exited = events.of("child_exited", child="leaf")[0]
    assert exited.data["reason"] == "shutdown:reached_max_restart_intensity"
    assert exited.data["gave_up"] is True
    assert bystander.starts == 1


async def test_a_transient_sub_supervisor_giving_up_stays_down_loudly(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """D3: OTP's rule (not restarted, no escalation), but never silent."""
    w, other = Probe("w"), Probe("other")
    sub = Supervisor("sub", [w.spec()], max_restarts=0)
    sup = make(bus, clock, [sub.child_spec(restart="transient"), other.spec()], max_restarts=0)
    async with sup:
        w.run.crash()
        exited = await events.wait_for("child_exited", child="sub")
        await settle()
        assert sup.status == "running"  # no escalation
        assert states(sup) == {"sub": "not_running", "other": "running"}
        assert exited.severity == Severity.WARNING
        assert "stays down" in exited.data["message"]
        assert events.of("max_intensity")[0].source == "sup/sub"
        assert sup.snapshot()["children"][0]["state"] == "failed"  # what status shows
        # the operator can bring it back
        assert (await sup.restart_child("sub")).info is sub
        assert w.starts == 2


async def test_a_temporary_sub_supervisor_giving_up_is_deleted(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    w = Probe("w")
    sub = Supervisor("sub", [w.spec()], max_restarts=0)
    async with make(bus, clock, [sub.child_spec(restart="temporary")]) as sup:
        w.run.crash()
        await events.wait_for("child_exited", child="sub")
        await settle()
        assert states(sup) == {}


async def test_a_restarted_sub_supervisor_rebuilds_only_its_static_children(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    w, extra = Probe("w"), Probe("extra")
    sub = Supervisor("sub", [w.spec()], max_restarts=0)
    async with make(bus, clock, [sub.child_spec()], max_restarts=3) as sup:
        with pytest.raises(SupervisorError, match="terminate_child"):
            await sub.stop()
        await sub.start_child(extra.spec())
        assert [c.id for c in sub.which_children()] == ["w", "extra"]
        w.run.crash()
        await events.wait_for("child_started", count=2, child="sub")
        assert [c.id for c in sub.which_children()] == ["w"]
        assert sup.which_child("sub").restarts == 1
        snap = sup.snapshot()
        assert snap["children"][0]["path"] == "sup/sub"
        assert snap["children"][0]["restarts"] == 1


async def test_sub_supervisors_inherit_bus_clock_and_random_from_their_parent(
    clock: ManualClock, bus: EventBus, events: Events
) -> None:
    w = Probe("w")
    sub = Supervisor("sub", [w.spec(backoff=Backoff(min=2, max=2, jitter=0))])
    async with make(bus, clock, [sub.child_spec()]):
        assert sub.bus is bus and sub.clock is clock
        w.run.crash()
        backoff = await events.wait_for("backoff", child="w")
        assert backoff.source == "sup/sub"
        await until(lambda: clock.sleepers == 1)
        clock.advance(2)
        await events.wait_for("child_started", count=2, child="w")


# ---------------------------------------------------------------------------------------
# §1.10 admin API


async def test_calls_on_a_stopped_supervisor_are_refused(bus: EventBus, clock: ManualClock) -> None:
    sup = make(bus, clock, [])
    with pytest.raises(SupervisorNotRunning, match="not running"):
        await sup.terminate_child("a")
    with pytest.raises(SupervisorNotRunning, match="never started"):
        await sup.wait()
    await sup.start()
    await sup.stop()
    await sup.stop()  # idempotent
    with pytest.raises(SupervisorNotRunning):
        await sup.start_child(Probe("a").spec())
    assert str(await sup.wait()) == "shutdown"


async def test_a_call_queued_when_the_supervisor_stops_is_answered(
    bus: EventBus, clock: ManualClock
) -> None:
    gate = Probe("g", modes=("ok", "gate"))
    async with make(bus, clock, [gate.spec(shutdown=0)]) as sup:
        await sup.terminate_child("g")
        restarting = asyncio.ensure_future(sup.restart_child("g"))  # blocks on the gate
        await until(lambda: gate.starts == 2)
        queued = asyncio.ensure_future(sup.terminate_child("g"))
        await settle()
        stopping = asyncio.ensure_future(sup.stop())
        with pytest.raises(SupervisorNotRunning, match="asked to stop"):
            async with asyncio.timeout(DEADLINE):
                await restarting
        with pytest.raises(SupervisorNotRunning, match="stopped before it could answer"):
            async with asyncio.timeout(DEADLINE):
                await queued
        async with asyncio.timeout(DEADLINE):
            await stopping


async def test_a_supervisor_can_be_started_again_and_runs_in_one_place(
    bus: EventBus, clock: ManualClock
) -> None:
    a = Probe("a")
    sup = make(bus, clock, [a.spec()])
    await sup.start()
    with pytest.raises(Exception, match="already running"):
        await sup.start()
    await sup.stop()
    await sup.start()
    assert a.starts == 2
    await sup.stop()


# ---------------------------------------------------------------------------------------
# Events and serialisation


async def test_event_payloads_name_the_supervisor_child_reason_and_count(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x")
    async with make(bus, clock, [x.spec()], max_restarts=3, max_seconds=60):
        clock.advance(12)
        x.run.crash("boom")
        restart = await events.wait_for("restart", child="x")
    exited = events.of("child_exited", child="x")[0]
    assert exited.source == "sup"
    assert exited.ts == 1_800_000_012.0
    assert exited.data == {
        "child": "x",
        "restart_type": "permanent",
        "action": "restart",
        "reason": "error:RuntimeError('boom')",
        "exception": "RuntimeError",
        "message": "boom",
    }
    assert restart.data["restarts"] == 1 and restart.severity == Severity.WARNING
    kinds = [k for k, _ in events.trail()]
    assert kinds[:2] == ["child_started", "sup_started"]
    assert kinds[-2:] == ["child_terminated", "sup_stopped"]
    for e in events.items:  # every payload is JSON-serialisable as it is
        json.dumps(e.to_dict())


async def test_an_exit_seen_late_after_a_terminate_is_not_treated_as_a_crash(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """The analogue of OTP's unlink_flush: a terminated child's exit is never restarted."""
    x = Probe("x")
    async with make(bus, clock, [x.spec()], max_restarts=0) as sup:
        x.run.crash()  # the exit message is queued...
        await sup.terminate_child("x")  # ...but may be handled after this
        await settle()
        assert sup.status == "running"
        assert states(sup) == {"x": "not_running"}
        assert events.of("restart") == [] and events.of("max_intensity") == []


# ---------------------------------------------------------------------------------------
# More OTP behaviour


async def test_a_call_in_progress_when_the_supervisor_is_cancelled_is_answered(
    bus: EventBus, clock: ManualClock, journal: list[str]
) -> None:
    gate = Probe("g", journal, modes=("gate",))
    sup = make(bus, clock, [])
    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    class Ctx:  # the supervisor runs as a child of a test-made parent
        id = "sup"
        path = "top/sup"
        stopping = asyncio.Event()

        def started(self, info: Any = None) -> None:
            ready.set_result(info)

    task = asyncio.ensure_future(sup.as_child()(Ctx()))
    async with asyncio.timeout(DEADLINE):
        await ready
    starting = asyncio.ensure_future(sup.start_child(gate.spec()))
    await until(lambda: gate.starts == 1)
    task.cancel()  # what a parent does past a finite shutdown time
    with pytest.raises(SupervisorNotRunning, match="cancelled before it could answer"):
        async with asyncio.timeout(DEADLINE):
            await starting
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: "end:g" in journal)  # the child being started was cancelled too
