"""The admin calls on dynamic children (companyd.supervision._dynamic) against §1.10, and
simple_one_for_one.

Every test runs real children (asyncio tasks) under a real Supervisor, with a ManualClock for
every window, timeout and delay, so nothing here sleeps for real except for a few loop
iterations. Section numbers refer to §1 of ../shared/reference/otp-supervisor.md; the test
kit is in supkit.py.
"""

from __future__ import annotations

import asyncio
import functools
import random

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.supervision import (
    AlreadyPresent,
    AlreadyStarted,
    ChildNotFound,
    ChildRunning,
    ChildSpec,
    InvalidSpec,
    NotSupported,
    StartFailed,
    Supervisor,
    SupervisorGaveUp,
)
from companyd.supervision._child import ChildContext

from .supkit import DEADLINE, Events, Probe, Run, dynamic, make, settle, states, until

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------------------------------
# §1.10 admin API


async def test_start_child_results(bus: EventBus, clock: ManualClock) -> None:
    async with make(bus, clock, [Probe("a").spec()]) as sup:
        with pytest.raises(AlreadyStarted, match="'a' is already running"):
            await sup.start_child(Probe("a").spec())
        await sup.terminate_child("a")
        with pytest.raises(AlreadyPresent, match="restart_child"):
            await sup.start_child(Probe("a").spec())
        with pytest.raises(StartFailed) as err:
            await sup.start_child(Probe("bad", default="fail").spec())
        assert err.value.child == "bad" and "bad" not in states(sup)  # not kept
        with pytest.raises(InvalidSpec, match="significant"):
            await sup.start_child(Probe("s").spec(restart="transient", significant=True))
        with pytest.raises(NotSupported, match="start_child"):
            await sup.start_instance()


async def test_terminate_restart_delete(bus: EventBus, clock: ManualClock, events: Events) -> None:
    a, t = Probe("a"), Probe("t")
    async with make(bus, clock, [a.spec(), t.spec(restart="temporary")]) as sup:
        with pytest.raises(ChildNotFound, match="no child 'nope'; its children: a, t"):
            await sup.terminate_child("nope")
        with pytest.raises(ChildRunning):
            await sup.restart_child("a")
        with pytest.raises(ChildRunning, match="terminate_child it first"):
            await sup.delete_child("a")
        await sup.terminate_child("a")
        await sup.terminate_child("a")  # idempotent
        assert len(events.of("child_terminated", child="a")) == 1
        await sup.terminate_child("t")  # temporary: spec dropped
        assert states(sup) == {"a": "not_running"}
        started = await sup.restart_child("a")
        assert started.id == "a" and started.running
        await sup.terminate_child("a")
        await sup.delete_child("a")
        with pytest.raises(ChildNotFound):
            await sup.delete_child("a")
        assert sup.count_children().specs == 0


async def test_dynamic_instances_start_restart_and_terminate_by_id(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    worker = Probe("job")
    async with dynamic(bus, clock, worker.spec(), max_restarts=5) as sup:
        assert sup.which_children() == []
        ids = [(await sup.start_instance()).id for _ in range(3)]
        assert ids == ["job-1", "job-2", "job-3"]
        assert sup.count_children().specs == 1 and sup.count_children().active == 3
        worker.runs[1].crash()
        await events.wait_for("child_started", count=2, child="job-2")
        assert states(sup) == {"job-1": "running", "job-2": "running", "job-3": "running"}
        await sup.terminate_child("job-1")
        await sup.terminate_child("job-1")  # ended instance: ok, like a dead pid
        with pytest.raises(ChildNotFound):
            await sup.terminate_child("job-99")
        assert list(states(sup)) == ["job-2", "job-3"]
        for call in (sup.restart_child, sup.delete_child):
            with pytest.raises(NotSupported, match="simple_one_for_one"):
                await call("job-2")
        # the template id names no child: OTP's {error, simple_one_for_one}
        for call in (sup.terminate_child, sup.kill_child):
            with pytest.raises(NotSupported, match="simple_one_for_one"):
                await call("job")
        await sup.kill_child("job-3")  # an instance: killed, then restarted (permanent)
        await events.wait_for("child_started", count=2, child="job-3")
        assert events.of("child_exited", child="job-3")[0].data["reason"] == "killed"
        with pytest.raises(NotSupported):
            await sup.start_child(Probe("x").spec())


async def test_dynamic_instances_take_their_own_arguments(
    bus: EventBus, clock: ManualClock
) -> None:
    seen: list[str] = []

    async def task(ctx: ChildContext, *, name: str) -> None:
        seen.append(f"{ctx.id}:{name}")
        ctx.started(name)
        await ctx.stopping.wait()

    async def template(ctx: ChildContext) -> None:
        await task(ctx, name="default")

    async with dynamic(bus, clock, ChildSpec(id="t", start=template)) as sup:
        assert (await sup.start_instance(functools.partial(task, name="alpha"))).info == "alpha"
        await sup.start_instance()
    assert seen == ["t-1:alpha", "t-2:default"]


@pytest.mark.parametrize(
    ("restart", "how", "kept"),
    [("temporary", "crash", False), ("transient", "normal", False), ("permanent", "normal", True)],
)
async def test_dynamic_instances_that_are_not_restarted_disappear(
    bus: EventBus, clock: ManualClock, events: Events, restart: str, how: str, kept: bool
) -> None:
    worker = Probe("job")
    async with dynamic(bus, clock, worker.spec(restart=restart)) as sup:
        await sup.start_instance()
        worker.run.exit(how)
        await events.wait_for("child_exited", child="job-1")
        await settle()
        assert ("job-1" in states(sup)) is kept


async def test_a_dynamic_instance_ignoring_its_restart_is_removed(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    worker = Probe("job", modes=("ok", "ignore"))
    async with dynamic(bus, clock, worker.spec()) as sup:
        await sup.start_instance()
        worker.run.crash()
        await events.wait_for("child_ignored", child="job-1")
        assert states(sup) == {}
        ignored = await sup.start_instance(Probe("job", modes=("ignore",)))
        assert not ignored.running and states(sup) == {}


async def test_dynamic_children_added_and_removed_while_others_crash(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    worker = Probe("job")
    rng = random.Random(3)
    async with dynamic(bus, clock, worker.spec(), max_restarts=1000, max_seconds=1) as sup:
        live: list[str] = []
        for round_ in range(30):
            live.append((await sup.start_instance()).id)
            terminating = None
            if round_ % 3 == 2:  # remove one instance while another crashes
                victim = live.pop(rng.randrange(len(live)))
                terminating = asyncio.ensure_future(sup.terminate_child(victim))
            target = rng.choice(live)
            current = {r.ctx.id: r for r in worker.runs}[target]
            current.crash()
            await events.wait_for("restart", count=round_ + 1)

            def replaced(t: str = target, c: Run = current) -> bool:
                return {r.ctx.id: r for r in worker.runs}[t] is not c

            await until(replaced)
            if terminating is not None:
                async with asyncio.timeout(DEADLINE):
                    await terminating
            clock.advance(0.1)
        await until(lambda: all(s == "running" for s in states(sup).values()))
        assert list(states(sup)) == sorted(live, key=lambda i: int(i.split("-")[1]))
        assert sup.count_children().active == len(live) == 20
        assert len(events.of("child_terminated", cause="terminate_child")) == 10
    assert events.of("max_intensity") == []


async def test_a_dynamic_instance_failing_to_restart_takes_the_supervisor_down(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    worker = Probe("job")
    sup = dynamic(bus, clock, worker.spec(), max_restarts=2)
    await sup.start()
    await sup.start_instance()
    await sup.start_instance()
    worker.default = "fail"
    worker.runs[0].crash()
    with pytest.raises(SupervisorGaveUp, match="job-1"):
        async with asyncio.timeout(DEADLINE):
            await sup.wait()
    assert events.of("child_terminated")[0].data["child"] == "job-2"


# ---------------------------------------------------------------------------------------
# More OTP behaviour


async def test_a_child_terminating_itself_does_not_deadlock(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    holder: list[Supervisor] = []

    async def suicidal(ctx: ChildContext) -> None:
        ctx.started()
        await holder[0].terminate_child(ctx.id)  # waits on its own supervisor

    sup = make(bus, clock, [ChildSpec(id="x", start=suicidal, shutdown=3)])
    holder.append(sup)
    async with sup:
        await until(lambda: clock.sleepers == 1)  # the shutdown timer of x
        clock.advance(3)
        terminated = await events.wait_for("child_terminated", child="x")
        assert terminated.data["stop"] == "cancelled"
        assert states(sup) == {"x": "not_running"}
        assert events.of("restart") == []


async def test_restart_child_is_impossible_for_a_temporary_child(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    t = Probe("t")
    async with make(bus, clock, [t.spec(restart="temporary")]) as sup:
        with pytest.raises(ChildRunning):
            await sup.restart_child("t")
        t.run.exit("normal")
        await events.wait_for("child_exited", child="t")
        with pytest.raises(ChildNotFound):
            await sup.restart_child("t")  # its spec went with it


# ---------------------------------------------------------------------------------------
# Further OTP scenarios (audit): cases beyond the list, against supervisor.erl


async def test_terminate_then_restart_child_then_it_is_supervised_again(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    a, b = Probe("a"), Probe("b")
    async with make(bus, clock, [a.spec(), b.spec()], max_restarts=1) as sup:
        await sup.terminate_child("a")
        assert states(sup) == {"a": "not_running", "b": "running"}
        await sup.restart_child("a")
        assert [c.id for c in sup.which_children()] == ["a", "b"]  # keeps its place
        a.run.crash()  # an ordinary supervised child again: restarted, counted
        await events.wait_for("child_started", count=3, child="a")
        assert sup.restarts_in_window() == 1 and states(sup)["a"] == "running"


async def test_restart_or_delete_of_a_running_child_is_refused_and_changes_nothing(
    bus: EventBus, clock: ManualClock
) -> None:
    a = Probe("a")
    async with make(bus, clock, [a.spec()]) as sup:
        with pytest.raises(ChildRunning):
            await sup.delete_child("a")
        with pytest.raises(ChildRunning):
            await sup.restart_child("a")
        assert states(sup) == {"a": "running"} and a.starts == 1
        with pytest.raises(ChildNotFound):
            await sup.restart_child("zz")


# ---------------------------------------------------------------------------------------
# OTP scenarios (checker pass): behaviour of §1 the tests above did not exercise


@pytest.mark.parametrize(
    ("restart", "restarted", "kept"),
    [("permanent", True, True), ("transient", True, True), ("temporary", False, False)],
)
async def test_kill_child_cancels_at_once_with_reason_killed_then_applies_the_restart_type(
    bus: EventBus, clock: ManualClock, events: Events, restart: str, restarted: bool, kept: bool
) -> None:
    """OTP's ``exit(Pid, kill)``: no stop request, no shutdown time; reason ``killed`` (an
    abnormal exit), then the child's restart type decides, counted like any crash.
    """
    x, other = Probe("x"), Probe("other")
    async with make(bus, clock, [x.spec(restart=restart, shutdown=30), other.spec()]) as sup:
        async with asyncio.timeout(DEADLINE):
            await sup.kill_child("x")
        assert not x.runs[0].stop_seen  # never asked to stop (it would have returned at once)
        exited = events.of("child_exited", child="x")[0]
        assert exited.data["reason"] == "killed"
        assert exited.data["action"] == ("restart" if restarted else "none")
        if restarted:
            await events.wait_for("child_started", count=2, child="x")
            assert states(sup) == {"x": "running", "other": "running"}
            assert sup.restarts_in_window() == 1
        else:
            assert ("x" in states(sup)) is kept and sup.restarts_in_window() == 0
        assert other.starts == 1
        assert events.of("child_terminated", child="x") == []  # not a terminate_child


async def test_kill_child_of_a_child_swallowing_cancellation_abandons_it_after_the_grace(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x", on_stop="swallow")
    async with make(bus, clock, [x.spec(restart="transient")], kill_grace=1.0) as sup:
        x.runs[0].ctx.stopping.set()  # make the body reach its cancellation-swallowing loop
        await until(lambda: x.run.stop_seen)
        killing = asyncio.ensure_future(sup.kill_child("x"))
        await until(lambda: x.runs[0].cancels == 1 and clock.sleepers == 2)
        clock.advance(1.0)
        async with asyncio.timeout(DEADLINE):
            await killing
        assert events.of("child_kill_failed", child="x")
        exited = events.of("child_exited", child="x")[0]
        assert (exited.data["reason"], exited.data["action"]) == ("killed", "restart")
        x.release()


async def test_kill_child_errors_and_no_ops_follow_terminate_child(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    x = Probe("x")
    async with make(bus, clock, [x.spec(restart="transient")]) as sup:
        with pytest.raises(ChildNotFound):
            await sup.kill_child("nope")
        await sup.terminate_child("x")
        await sup.kill_child("x")  # not running: nothing to kill, nothing restarted
        assert states(sup) == {"x": "not_running"} and x.starts == 1
        assert events.of("child_exited", child="x") == []


@pytest.mark.parametrize("how", ["terminate", "normal", "crash"])
async def test_a_temporary_childs_spec_is_gone_after_any_termination(
    bus: EventBus, clock: ManualClock, events: Events, how: str
) -> None:
    """do_not_save_child_specs_for_temporary_children: counts drop and the id is free;
    permanent and transient specs stay (already_started / already_present).
    """
    t, p, tr = Probe("t"), Probe("p"), Probe("tr")
    specs = [t.spec(restart="temporary"), p.spec(), tr.spec(restart="transient")]
    async with make(bus, clock, specs) as sup:
        assert sup.count_children().specs == 3
        if how == "terminate":
            await sup.terminate_child("t")
        else:
            t.run.exit("normal") if how == "normal" else t.run.crash()
            await events.wait_for("child_exited", child="t")
        counts = sup.count_children()
        assert (counts.specs, counts.active, counts.workers) == (2, 2, 2)
        with pytest.raises(ChildNotFound):
            sup.which_child("t")
        assert (await sup.start_child(Probe("t").spec(restart="temporary"))).running
        with pytest.raises(AlreadyStarted):
            await sup.start_child(Probe("p").spec())
        await sup.terminate_child("tr")
        with pytest.raises(AlreadyPresent):
            await sup.start_child(Probe("tr").spec(restart="transient"))


async def test_restart_child_of_a_transient_child_that_ended_normally(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """§1.10: restart_child starts a stopped child again; a start answering IGNORE gives
    {ok, undefined}: not running, spec kept. Neither is counted.
    """
    tr = Probe("tr", modes=("ok", "ok", "ignore"))
    async with make(bus, clock, [tr.spec(restart="transient")], max_restarts=0) as sup:
        tr.run.exit("normal")
        await events.wait_for("child_exited", child="tr")
        assert (await sup.restart_child("tr")).running
        await sup.terminate_child("tr")
        started = await sup.restart_child("tr")
        assert started.running is False and states(sup) == {"tr": "not_running"}
        assert sup.restarts_in_window() == 0 and sup.status == "running"


async def test_dynamic_exits_that_are_not_restarted_are_not_counted(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """§1.3 per instance: temporary instances (any exit) never touch intensity."""
    worker = Probe("job")
    async with dynamic(bus, clock, worker.spec(restart="temporary"), max_restarts=0) as sup:
        for _ in range(3):
            await sup.start_instance()
        worker.runs[0].crash()
        worker.runs[1].exit("normal")
        await events.wait_for("child_exited", count=2)
        await settle()
        assert sup.status == "running" and sup.restarts_in_window() == 0
        assert list(states(sup)) == ["job-3"]
