"""The supervisor against OTP's rules (../shared/reference/otp-supervisor.md §1).

Every test runs real children (asyncio tasks) under a real :class:`Supervisor`, with a
:class:`ManualClock` for every window, timeout and delay, so nothing here sleeps for real
except for a few loop iterations. Section numbers in the test names' docstrings refer to §1
of the reference.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from companyd.clock import ManualClock
from companyd.events import Event, EventBus, Severity
from companyd.supervision import (
    BRUTAL_KILL,
    IGNORE,
    INFINITY,
    AlreadyPresent,
    AlreadyStarted,
    Backoff,
    ChildNotFound,
    ChildRestarting,
    ChildRunning,
    ChildSpec,
    InvalidSpec,
    NotSupported,
    StartFailed,
    Supervisor,
    SupervisorError,
    SupervisorFlags,
    SupervisorGaveUp,
    SupervisorNotRunning,
    SupervisorStartError,
)
from companyd.supervision.child import ChildContext, Shutdown

pytestmark = pytest.mark.anyio

DEADLINE = 5.0


# ---------------------------------------------------------------------------------------
# Test kit: a child body the test drives, and an event recorder


class Run:
    """One run of a :class:`Probe`: the test tells it how to end."""

    def __init__(self, ctx: ChildContext) -> None:
        self.ctx = ctx
        self.command: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
        self.gate = asyncio.Event()
        self.cancels = 0
        self.stop_seen = False

    def crash(self, message: str | None = None) -> None:
        self.command.set_result(("crash", message))

    def exit(self, how: str = "normal", info: Any = None) -> None:
        self.command.set_result((how, info))


class Probe:
    """A child body. Each start appends a :class:`Run` and logs to a shared journal.

    ``modes`` are consumed one per start (then ``default``): ``ok`` calls ``started``;
    ``fail`` raises before it; ``return`` returns before it; ``ignore`` answers IGNORE;
    ``gate`` waits for ``run.gate`` first; ``hang`` never becomes ready.
    ``on_stop`` is how it answers the stop request: ``return`` (cooperative), ``ignore``
    (keeps running until cancelled), ``swallow`` (ignores cancellation too, until
    ``release``), ``error`` (raises while stopping).
    """

    def __init__(
        self,
        name: str,
        journal: list[str] | None = None,
        *,
        modes: tuple[str, ...] = (),
        default: str = "ok",
        on_stop: str = "return",
        info: Any = None,
    ) -> None:
        self.name = name
        self.journal = journal if journal is not None else []
        self.modes = list(modes)
        self.default = default
        self.on_stop = on_stop
        self.info = info
        self.runs: list[Run] = []
        self.released = asyncio.Event()

    def spec(self, **kw: Any) -> ChildSpec:
        return ChildSpec(id=self.name, start=self, **kw)

    @property
    def starts(self) -> int:
        return len(self.runs)

    @property
    def run(self) -> Run:
        return self.runs[-1]

    def release(self) -> None:
        self.released.set()

    async def __call__(self, ctx: ChildContext) -> None:
        run = Run(ctx)
        self.runs.append(run)
        mode = self.modes.pop(0) if self.modes else self.default
        self.journal.append(f"start:{self.name}")
        try:
            await self._body(ctx, run, mode)
        finally:
            self.journal.append(f"end:{self.name}")

    async def _body(self, ctx: ChildContext, run: Run, mode: str) -> None:
        if mode == "fail":
            raise RuntimeError(f"{self.name} cannot start")
        if mode == "return":
            return
        if mode == "ignore":
            ctx.started(IGNORE)
            return
        if mode == "hang":
            await asyncio.Event().wait()
        if mode == "gate":
            await run.gate.wait()
        ctx.started(self.info)
        stop = asyncio.ensure_future(ctx.stopping.wait())
        either: set[asyncio.Future[Any]] = {run.command, stop}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if run.command.done():
            how, arg = run.command.result()
            if how == "crash":
                raise RuntimeError(arg or f"{self.name} crashed")
            if how == "shutdown":
                raise Shutdown(arg)
            if how == "foreign_cancel":
                raise asyncio.CancelledError()
            return  # normal
        run.stop_seen = True
        if self.on_stop == "error":
            raise ValueError(f"{self.name} broke while stopping")
        if self.on_stop == "ignore":
            await asyncio.Event().wait()
        if self.on_stop == "swallow":
            while not self.released.is_set():
                try:
                    await self.released.wait()
                except asyncio.CancelledError:
                    run.cancels += 1


class Events:
    """Records every event on a bus; tests wait for facts instead of sleeping."""

    def __init__(self, bus: EventBus) -> None:
        self.items: list[Event] = []
        self._changed = asyncio.Event()
        bus.add_listener(self._on)

    def _on(self, event: Event) -> None:
        self.items.append(event)
        self._changed.set()

    def of(self, kind: str, **match: Any) -> list[Event]:
        return [
            e
            for e in self.items
            if e.kind == kind and all(e.data.get(k) == v for k, v in match.items())
        ]

    def trail(self, *kinds: str) -> list[tuple[str, str | None]]:
        """(kind, child) of every event, optionally only of ``kinds``."""
        return [(e.kind, e.data.get("child")) for e in self.items if not kinds or e.kind in kinds]

    async def wait_for(self, kind: str, count: int = 1, **match: Any) -> Event:
        async with asyncio.timeout(DEADLINE):
            while len(self.of(kind, **match)) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.of(kind, **match)[count - 1]


async def settle(rounds: int = 30) -> None:
    """Let every ready task run; used only to show that something did *not* happen."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def until(cond: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not cond():
            await asyncio.sleep(0)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def bus(clock: ManualClock) -> EventBus:
    return EventBus(clock)


@pytest.fixture
def events(bus: EventBus) -> Events:
    return Events(bus)


@pytest.fixture
def journal() -> list[str]:
    return []


def make(bus: EventBus, clock: ManualClock, children: list[ChildSpec], **kw: Any) -> Supervisor:
    kw.setdefault("random", random.Random(7).random)
    return Supervisor("sup", children, bus=bus, clock=clock, **kw)


def states(sup: Supervisor) -> dict[str, str]:
    return {c.id: c.state for c in sup.which_children()}


# ---------------------------------------------------------------------------------------
# §1.1 specs and flags


def test_child_spec_defaults_follow_otp() -> None:
    async def body(ctx: ChildContext) -> None: ...

    worker = ChildSpec(id="w", start=body)
    assert (worker.restart, worker.shutdown, worker.type, worker.significant) == (
        "permanent",
        5.0,
        "worker",
        False,
    )
    assert ChildSpec(id="s", start=body, type="supervisor").shutdown == INFINITY


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"id": ""}, "child id"),
        ({"id": "a/b"}, "without '/'"),
        ({"restart": "sometimes"}, "'sometimes'"),
        ({"type": "daemon"}, "'daemon'"),
        ({"shutdown": -10}, "-10"),
        ({"shutdown": "soon"}, "'soon'"),
        ({"shutdown": True}, "True"),
        ({"significant": True}, "cannot be permanent"),
        ({"significant": "yes"}, "'yes'"),
        ({"start": 42}, "42"),
    ],
)
def test_invalid_child_specs_are_refused_with_the_value(
    fields: dict[str, Any], needle: str
) -> None:
    async def body(ctx: ChildContext) -> None: ...

    with pytest.raises(InvalidSpec, match=needle.replace("(", r"\(")):
        ChildSpec(**{"id": "c", "start": body, **fields})


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"strategy": "one_for_some"}, "'one_for_some'"),
        ({"max_restarts": -1}, "-1"),
        ({"max_restarts": 1.5}, "1.5"),
        ({"max_seconds": 0}, "0"),
        ({"auto_shutdown": "sometimes"}, "'sometimes'"),
        ({"strategy": "simple_one_for_one", "auto_shutdown": "any_significant"}, "not allowed"),
    ],
)
def test_invalid_flags_are_refused(flags: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidSpec, match=needle):
        SupervisorFlags(**flags)


def test_supervisor_refuses_duplicates_and_bad_combinations() -> None:
    a = Probe("a")
    with pytest.raises(InvalidSpec, match="duplicate child id 'a'"):
        Supervisor("s", [a.spec(), a.spec()])
    with pytest.raises(InvalidSpec, match="auto_shutdown is 'never'"):
        Supervisor("s", [a.spec(restart="transient", significant=True)])
    with pytest.raises(InvalidSpec, match="exactly one template"):
        Supervisor("s", [a.spec(), Probe("b").spec()], strategy="simple_one_for_one")
    with pytest.raises(InvalidSpec, match="kill_grace"):
        Supervisor("s", [], kill_grace=-1)


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


async def crash_and_wait(probe: Probe, events: Events, n: int) -> None:
    probe.run.crash()
    await events.wait_for("child_exited", count=n, child=probe.name)


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
# simple_one_for_one (the dynamic strategy)


def dynamic(bus: EventBus, clock: ManualClock, template: ChildSpec, **kw: Any) -> Supervisor:
    return make(bus, clock, [template], strategy="simple_one_for_one", **kw)


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
# Backoff (D8, an extension)


def test_backoff_formula_caps_after_jitter_and_never_overflows() -> None:
    b = Backoff(min=1, max=60, factor=2, jitter=0.2)
    assert [b.delay(n, 0.0) for n in range(7)] == [1, 2, 4, 8, 16, 32, 60]
    assert b.delay(0, 0.5) == pytest.approx(1.1)
    assert b.delay(5, 0.999) == pytest.approx(32 * 1.1998)
    assert b.delay(6, 0.999) == 60  # 64 * 1.2 capped after the jitter: never above max
    assert b.delay(10_000, 0.5) == 60
    for bad in ({"min": -1}, {"max": 0.5}, {"factor": 0.5}, {"jitter": 2}, {"reset_after": 0}):
        with pytest.raises(InvalidSpec):
            Backoff(**bad)


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


async def test_count_children_counts_supervisors_and_workers(
    bus: EventBus, clock: ManualClock
) -> None:
    sub = Supervisor("sub", [Probe("w").spec()])
    specs = [Probe("a").spec(), sub.child_spec(), Probe("b", modes=("ignore",)).spec()]
    async with make(bus, clock, specs) as sup:
        counts = sup.count_children()
        assert (counts.specs, counts.active, counts.supervisors, counts.workers) == (3, 2, 1, 2)
        assert sup.which_child("sub").type == "supervisor"
        with pytest.raises(ChildNotFound):
            sup.which_child("nope")


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


async def test_snapshot_is_the_status_tree(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """The node shape `companyd status` renders (docs/daemon.md, "tree")."""
    w, ok, bad = Probe("w"), Probe("ok"), Probe("bad")
    sub = Supervisor("sub", [w.spec()])
    specs = [sub.child_spec(), ok.spec(restart="transient"), bad.spec(restart="temporary")]
    async with make(bus, clock, specs, max_restarts=5) as sup:
        clock.advance(30)
        ok.run.exit("normal")
        await events.wait_for("child_exited", child="ok")
        w.run.crash()
        await events.wait_for("child_started", count=2, child="w")
        clock.advance(5)
        snap = sup.snapshot()
    json.dumps(snap)
    assert {k: snap[k] for k in ("id", "path", "kind", "state", "restarts", "uptime_s")} == {
        "id": "sup",
        "path": "sup",
        "kind": "supervisor",
        "state": "running",
        "restarts": 0,
        "uptime_s": 35.0,
    }
    assert snap["strategy"] == "one_for_one" and snap["restarts_in_window"] == 0
    node_sub, node_ok, node_bad = snap["children"]
    assert (node_sub["id"], node_sub["kind"], node_sub["state"]) == ("sub", "supervisor", "running")
    assert node_sub["strategy"] == "one_for_one" and node_sub["restarts_in_window"] == 1
    (node_w,) = node_sub["children"]
    assert node_w["path"] == "sup/sub/w" and node_w["restarts"] == 1
    assert node_w["uptime_s"] == 5.0
    assert node_w["last_exit"] == "error:RuntimeError('w crashed')"
    assert (node_ok["state"], node_ok["uptime_s"], node_ok["last_exit"]) == (
        "stopped",
        None,
        "normal",
    )
    assert (node_bad["kind"], node_bad["state"], node_bad["children"]) == ("worker", "running", [])


# ---------------------------------------------------------------------------------------
# Further OTP scenarios (audit): cases beyond the list, against supervisor.erl


@pytest.mark.parametrize("restart", ["temporary", "transient"])
async def test_rest_for_one_later_temporary_or_stopped_siblings(
    bus: EventBus, clock: ManualClock, events: Events, restart: str
) -> None:
    """rest_for_one: a temporary child after the crashed one is removed; one before it is
    untouched; a non-temporary later child that was down is started with the group."""
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
    """max 2 in 10 s: crashes at 0, 6, 12, 18, 24 never have 3 within 10 s."""
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
    bystander's own exit is not a second (counted) restart."""
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
    runs — so restart_child brings it back."""
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
    and stops the rest in reverse start order."""
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
    removed) by a group restart, and a significant transient one stopped and restarted."""
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
    does with the cancellation (here: swallows it and returns), its reason is ``killed``."""
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


@pytest.mark.parametrize(
    ("restart", "restarted", "kept"),
    [("permanent", True, True), ("transient", True, True), ("temporary", False, False)],
)
async def test_kill_child_cancels_at_once_with_reason_killed_then_applies_the_restart_type(
    bus: EventBus, clock: ManualClock, events: Events, restart: str, restarted: bool, kept: bool
) -> None:
    """OTP's ``exit(Pid, kill)``: no stop request, no shutdown time; reason ``killed`` (an
    abnormal exit), then the child's restart type decides, counted like any crash."""
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


@pytest.mark.parametrize("how", ["terminate", "normal", "crash"])
async def test_a_temporary_childs_spec_is_gone_after_any_termination(
    bus: EventBus, clock: ManualClock, events: Events, how: str
) -> None:
    """do_not_save_child_specs_for_temporary_children: counts drop and the id is free;
    permanent and transient specs stay (already_started / already_present)."""
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
    {ok, undefined}: not running, spec kept. Neither is counted."""
    tr = Probe("tr", modes=("ok", "ok", "ignore"))
    async with make(bus, clock, [tr.spec(restart="transient")], max_restarts=0) as sup:
        tr.run.exit("normal")
        await events.wait_for("child_exited", child="tr")
        assert (await sup.restart_child("tr")).running
        await sup.terminate_child("tr")
        started = await sup.restart_child("tr")
        assert started.running is False and states(sup) == {"tr": "not_running"}
        assert sup.restarts_in_window() == 0 and sup.status == "running"


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
async def test_a_significant_transient_normal_exit_shuts_down_without_a_group_restart(
    bus: EventBus, clock: ManualClock, events: Events, journal: list[str], strategy: Any
) -> None:
    """§1.9 × §1.4: a normal exit of a transient child is no restart (no group), but a
    significant one ends the supervisor; the others stop in reverse start order."""
    a, s, c = Probe("a", journal), Probe("s", journal), Probe("c", journal)
    specs = [a.spec(), s.spec(restart="transient", significant=True), c.spec()]
    sup = make(bus, clock, specs, strategy=strategy, auto_shutdown="any_significant")
    await sup.start()
    s.run.exit("normal")
    async with asyncio.timeout(DEADLINE):
        assert str(await sup.wait()) == "shutdown:auto_shutdown"
    assert events.of("restart") == [] and (a.starts, s.starts, c.starts) == (1, 1, 1)
    assert journal[-3:] == ["end:s", "end:c", "end:a"]


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
