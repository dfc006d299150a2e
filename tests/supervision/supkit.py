"""The supervision tests' kit: a child body the test drives, an event recorder, helpers.

A plain module with a unique name (not conftest.py), imported relatively by the tests of
this directory; the fixtures (clock, bus, events, journal) are in conftest.py.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from companyd.clock import ManualClock
from companyd.events import Event, EventBus
from companyd.supervision import IGNORE, ChildSpec, Supervisor
from companyd.supervision._child import ChildContext, Shutdown

DEADLINE = 5.0


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


def make(bus: EventBus, clock: ManualClock, children: list[ChildSpec], **kw: Any) -> Supervisor:
    kw.setdefault("random", random.Random(7).random)
    return Supervisor("sup", children, bus=bus, clock=clock, **kw)


def states(sup: Supervisor) -> dict[str, str]:
    return {c.id: c.state for c in sup.which_children()}


async def crash_and_wait(probe: Probe, events: Events, n: int) -> None:
    probe.run.crash()
    await events.wait_for("child_exited", count=n, child=probe.name)


def dynamic(bus: EventBus, clock: ManualClock, template: ChildSpec, **kw: Any) -> Supervisor:
    return make(bus, clock, [template], strategy="simple_one_for_one", **kw)
