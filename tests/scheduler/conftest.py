"""Helpers for the scheduler tests: a small real TaskSink, a company builder, a harness.

``ScriptedSink`` is a TaskSink implementation in its own right (the scheduler's Protocol,
not a mock of an SDK): it records tasks, answers with scripted outcomes, and can hold runs
open until a test releases them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import textwrap
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from companyd.clock import ManualClock
from companyd.config import CompanyConfig, load_config_text
from companyd.events import Event, EventBus
from companyd.runs import RunOutcome, RunStatus, Task, new_id
from companyd.scheduler._service import RoutineScheduler
from companyd.scheduler._sim import advance
from companyd.scheduler._store import DB_NAME, FireRecord, recent_fires


def ts(text: str) -> float:
    """Epoch seconds of an ISO time (UTC when no offset is given)."""
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat()


def company(routines: str, *, timezone: str = "UTC") -> CompanyConfig:
    """A small valid company with agents ceo, marketing, coo and the given routines YAML."""
    return load_config_text(company_text(routines, timezone=timezone))


def company_text(routines: str, *, timezone: str = "UTC") -> str:
    """The company.yaml text behind :func:`company`."""
    return textwrap.dedent(
        f"""\
        schema: companyd/v1
        company:
          name: Test Co
          timezone: {timezone}
          budget: {{monthly_usd: 100}}
        agents:
          ceo: {{title: CEO, instructions: Lead.}}
          marketing: {{title: Marketing, reportsTo: ceo, instructions: Post.}}
          coo: {{title: COO, reportsTo: ceo, instructions: Operate.}}
        routines:
        """
    ) + textwrap.indent(textwrap.dedent(routines), "  ")


@dataclass
class ScriptedSink:
    """A TaskSink for tests.

    ``script`` maps a routine slug to a function ``task -> (status, reason, cost)``; the
    default is ``ok`` at $0.01. ``hold`` makes submit wait on ``gate`` before answering.
    """

    script: dict[str, Callable[[Task], tuple[RunStatus, str | None, float]]] = field(
        default_factory=dict
    )
    raise_for: set[str] = field(default_factory=set)
    hold: bool = False
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    memory: int = 0
    inbox: Counter[str] = field(default_factory=Counter)
    tasks: list[Task] = field(default_factory=list)
    active: int = 0
    max_active: int = 0
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    restores: bool = False
    restored: dict[str, asyncio.Future[RunOutcome]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    async def submit(self, task: Task) -> RunOutcome:
        self.tasks.append(task)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.entered.set()
        try:
            if task.routine in self.raise_for:
                raise ConnectionError("mailbox of agent is closed")
            if self.hold:
                await self.gate.wait()
            fn = self.script.get(task.routine or "")
            status, reason, cost = fn(task) if fn else (RunStatus.OK, None, 0.01)
            return RunOutcome(
                task_id=task.id,
                run_id=new_id("run"),
                agent=task.agent,
                status=status,
                started=0.0,
                ended=0.0,
                reason=reason,
                cost_usd=cost,
            )
        finally:
            self.active -= 1

    def inbox_size(self, agent: str) -> int:
        return self.inbox[agent]

    def rate_limited_until(self, agent: str) -> float | None:
        return None

    async def memory_marker(self) -> str:
        return f"v{self.memory}"

    def resumed(self, task_id: str) -> asyncio.Future[RunOutcome] | None:
        """With ``restores`` set, the runtime holds every task asked about: a future the
        test resolves (``restored[task_id]``); otherwise it holds none.
        """
        self.asked.append(task_id)
        if not self.restores:
            return None
        fut: asyncio.Future[RunOutcome] = asyncio.get_running_loop().create_future()
        self.restored[task_id] = fut
        return fut

    async def ended_outcome(self, task_id: str) -> RunOutcome | None:
        """The runtime keeps no journal here: no ended run is known."""
        return None


@dataclass
class ScriptedBackups:
    """A BackupSink for tests (the scheduler's Protocol, as :class:`ScriptedSink` is): each
    backup writes a small real file into the routine's directory and says so; ``hold``
    makes a backup wait on ``gate`` first (a stop then comes under it, and it writes
    nothing).
    """

    hold: bool = False
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    written: list[Path] = field(default_factory=list)

    async def scheduled_backup(self, directory: Path, keep: int) -> str:
        self.entered.set()
        if self.hold:
            await self.gate.wait()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"backup-{len(self.written) + 1}.tar.gz"
        path.write_bytes(b"backup")
        self.written.append(path)
        return f"backup written: {path} (6 bytes, 0.0 s); 0 older removed"


class Harness:
    """One company, one state dir, one clock; schedulers started and stopped on them."""

    def __init__(self, config: CompanyConfig, state_dir: Path, clock: ManualClock) -> None:
        self.config = config
        self.state_dir = state_dir
        self.clock = clock
        self.bus = EventBus(clock)
        self.events: list[Event] = []
        self.bus.add_listener(self.events.append)
        self.sink = ScriptedSink()
        self.sched: RoutineScheduler | None = None

    async def start(self, config: CompanyConfig | None = None, **kw: Any) -> RoutineScheduler:
        if config is not None:
            self.config = config
        kw.setdefault("max_sleep", None)
        self.sched = RoutineScheduler(
            self.config,
            self.sink,
            state_dir=self.state_dir,
            bus=self.bus,
            clock=self.clock,
            **kw,
        )
        async with asyncio.timeout(10):
            await self.sched.start()
            self.sched.take_owed_backups()  # as RoutineScheduler.run() does once ready
            await self.sched.settle(runs=not self.sink.hold)
        return self.sched

    async def stop(self) -> None:
        if self.sched is not None:
            async with asyncio.timeout(10):
                await self.sched.stop()

    async def advance(self, seconds: float, *, runs: bool = True) -> None:
        assert self.sched is not None
        async with asyncio.timeout(30):
            await advance(self.sched, self.clock, seconds, runs=runs)

    async def advance_to(self, when: str, *, runs: bool = True) -> None:
        await self.advance(ts(when) - self.clock.time(), runs=runs)

    def history(self, routine: str, limit: int = 100_000) -> list[FireRecord]:
        """Oldest first, read with a connection of the test's own."""
        conn = sqlite3.connect(self.state_dir / DB_NAME)
        try:
            return list(reversed(recent_fires(conn, routine, limit)))
        finally:
            conn.close()

    def kinds(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]


@pytest.fixture
async def make_harness(tmp_path: Path) -> AsyncIterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(config: CompanyConfig, start: str = "2027-01-04T00:00:00") -> Harness:
        h = Harness(config, tmp_path / "state", ManualClock(start=ts(start)))
        made.append(h)
        return h

    yield make
    for h in made:
        h.sink.gate.set()
        await h.stop()
