"""Start-up (companyd.supervision._startup): init, each child confirmed ready, §1.2.

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
from companyd.events import EventBus
from companyd.supervision import (
    IGNORE,
    ChildSpec,
    InvalidSpec,
    Supervisor,
    SupervisorFlags,
    SupervisorNotRunning,
    SupervisorStartError,
)

from .supkit import DEADLINE, Events, Probe, make, settle, states, until

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------------------------------
# §1.2 start-up


async def test_children_start_in_order_each_ready_before_the_next(
    bus: EventBus, clock: ManualClock, journal: list[str]
) -> None:
    a, b, c = Probe("a", journal, modes=("gate",)), Probe("b", journal), Probe("c", journal)
    sup = make(bus, clock, [a.spec(), b.spec(), c.spec()])
    starting = asyncio.ensure_future(sup.start())
    await until(lambda: a.starts == 1)
    await settle()
    assert journal == ["start:a"]  # b waits until a is ready
    assert not starting.done()
    a.run.gate.set()
    async with asyncio.timeout(DEADLINE):
        await starting
    assert journal == ["start:a", "start:b", "start:c"]
    assert [c.id for c in sup.which_children()] == ["a", "b", "c"]  # start order (D5)
    await sup.stop()
    assert journal[3:] == ["end:c", "end:b", "end:a"]


async def test_started_info_and_uptime_are_reported(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    a = Probe("a", info={"port": 1})
    async with make(bus, clock, [a.spec()]) as sup:
        info = sup.which_child("a")
        assert info.started_at == clock.time()
        assert info.state == "running"
        started = await events.wait_for("child_started", child="a")
        assert started.source == "sup"
        assert started.ts == clock.time()
        b = Probe("b", info="hello")
        assert (await sup.start_child(b.spec())).info == "hello"


async def test_init_failure_stops_started_children_in_reverse_and_never_restarts(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str]
) -> None:
    a, b, c, d = (Probe(n, journal) for n in "abcd")
    c.default = "fail"
    sup = make(bus, clock, [a.spec(), b.spec(), c.spec(), d.spec()], max_restarts=0)
    with pytest.raises(SupervisorStartError, match="child 'c' failed to start") as err:
        await sup.start()
    assert err.value.child == "c"
    assert "cannot start" in str(err.value.reason)
    assert d.starts == 0  # never started
    assert journal == ["start:a", "start:b", "start:c", "end:c", "end:b", "end:a"]
    assert events.of("restart") == [] and events.of("max_intensity") == []
    assert events.trail("child_terminated") == [
        ("child_terminated", "b"),
        ("child_terminated", "a"),
    ]
    assert events.of("sup_stopped")[0].data["reason"] == "failed_to_start:c"
    with pytest.raises(SupervisorStartError):
        await sup.wait()


async def test_a_child_that_returns_before_started_failed_to_start(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    a = Probe("a", modes=("return",))
    with pytest.raises(SupervisorStartError, match=r"before calling ctx\.started"):
        await make(bus, clock, [a.spec()]).start()
    assert events.of("child_start_failed", child="a")[0].data["exception"] == "RuntimeError"


async def test_init_callable_failure_fails_the_start(bus: EventBus, clock: ManualClock) -> None:
    def init() -> Any:
        raise KeyError("no config")

    with pytest.raises(SupervisorStartError, match="failed to initialise") as err:
        await Supervisor("s", init=init, bus=bus, clock=clock).start()
    assert err.value.child is None


async def test_init_failure_cascades_through_nested_supervisors(
    bus: EventBus, clock: ManualClock, journal: list[str]
) -> None:
    a, x = Probe("a", journal), Probe("x", journal, default="fail")
    inner = Supervisor("inner", [x.spec()])
    outer = make(bus, clock, [a.spec(), inner.child_spec()])
    with pytest.raises(SupervisorStartError, match="child 'inner' failed") as err:
        await outer.start()
    assert "SupervisorStartError" in str(err.value.reason)
    assert journal == ["start:a", "start:x", "end:x", "end:a"]


async def test_ignore_keeps_the_spec_not_running_but_drops_a_temporary_one(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    p, t = Probe("p", modes=("ignore",)), Probe("t", modes=("ignore",))
    async with make(bus, clock, [p.spec(), t.spec(restart="temporary")]) as sup:
        assert states(sup) == {"p": "not_running"}
        counts = sup.count_children()
        assert (counts.specs, counts.active, counts.workers) == (1, 0, 1)
        assert {e.data["child"] for e in events.of("child_ignored")} == {"p", "t"}
        assert (await sup.restart_child("p")).running
        assert states(sup) == {"p": "running"}
        started = await sup.start_child(Probe("t2", modes=("ignore",)).spec(restart="temporary"))
        assert started.running is False
        assert "t2" not in states(sup)


# ---------------------------------------------------------------------------------------
# More OTP behaviour


async def test_a_crash_during_init_is_handled_once_the_supervisor_is_up(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    a, b = Probe("a"), Probe("b", modes=("gate",))
    sup = make(bus, clock, [a.spec(), b.spec()])
    starting = asyncio.ensure_future(sup.start())
    await until(lambda: b.starts == 1)
    a.run.crash()
    await settle()
    assert events.of("restart") == []  # init first (OTP: 'EXIT' waits in the mailbox)
    b.run.gate.set()
    async with asyncio.timeout(DEADLINE):
        await starting
    await events.wait_for("child_started", count=2, child="a")
    kinds = [k for k, c in events.trail() if k in ("sup_started", "restart")]
    assert kinds == ["sup_started", "restart"]
    await sup.stop()


async def test_init_callable_is_rerun_on_every_start(bus: EventBus, clock: ManualClock) -> None:
    calls: list[int] = []
    a, b = Probe("a"), Probe("b")

    def init() -> tuple[SupervisorFlags, list[ChildSpec]]:
        calls.append(1)
        children = [a.spec()] if len(calls) == 1 else [a.spec(), b.spec()]
        return SupervisorFlags(strategy="one_for_all", max_restarts=7), children

    sup = Supervisor("s", init=init, bus=bus, clock=clock)
    async with sup:
        assert sup.flags.max_restarts == 7 and list(states(sup)) == ["a"]
    async with sup:
        assert list(states(sup)) == ["a", "b"]
    with pytest.raises(InvalidSpec, match="either children or init"):
        Supervisor("s", [a.spec()], init=init)


async def test_an_init_answering_ignore_means_the_supervisor_does_not_run(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """sup_start_ignore_init: the root does not start; a nested one is kept not running."""
    lazy = Supervisor("lazy", init=lambda: IGNORE)
    with pytest.raises(SupervisorNotRunning, match="init answered IGNORE"):
        await Supervisor("root", init=lambda: IGNORE, bus=bus, clock=clock).start()
    async with make(bus, clock, [lazy.child_spec(), Probe("a").spec()]) as sup:
        assert states(sup) == {"lazy": "not_running", "a": "running"}
        assert events.of("child_ignored", child="lazy")[0].source == "sup"
        assert lazy.status == "stopped"
