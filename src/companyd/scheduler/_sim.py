"""Compressed time: run a company's routines for days of schedule in seconds.

:func:`simulate` drives a real :class:`~companyd.scheduler._service.RoutineScheduler` — real
APScheduler, real SQLite history, real events — on a :class:`~companyd.clock.ManualClock`,
jumping from one wakeup of the scheduler to the next, optionally with the daemon down for
some windows, and then audits the history against the schedule computed independently from
company.yaml: every due fire time must have exactly one row, and every row that is not
``ok`` (or ``idle``) must carry a reason.

The sink is whatever runs the tasks: :class:`FlakySink` here (a stand-in runtime whose model
calls fail transiently at a given rate), or the real agent runtime against the loopback
Messages API server (:mod:`companyd.testing.sim_runtime`). By default the sink must not
wait on the simulated clock (its runs take zero simulated time; real time spent in them is
fine). A runtime that does wait on it between attempts — ClaudeBackend's retry backoff —
runs with a :class:`ModelCallGate`: simulated time then still stands still while a run
works, and moves on only while every model call in flight is sleeping on the clock.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from companyd.clock import ManualClock, utc_from_ts
from companyd.config import CompanyConfig
from companyd.events import EventBus
from companyd.llm import ModelBackend, ModelRequest, ModelResponse, RetryHook
from companyd.runs import RunOutcome, RunStatus, Task
from companyd.scheduler import _store as db
from companyd.scheduler._ids import new_id
from companyd.scheduler._service import RoutineScheduler
from companyd.scheduler._sink import TaskSink
from companyd.scheduler._triggers import build_trigger, fire_times

__all__ = [
    "FlakySink",
    "ModelCallGate",
    "RoutineSimStats",
    "SimReport",
    "advance",
    "simulate",
]


#: A scheduler wakeup this close after the end of an advance is served by it: ManualClock
#: sums its two readings separately, so after thousands of steps the wall time the
#: scheduler fires on can trail the monotonic time the driver counts by float rounding
#: (~1e-7 s), and a fire time at the very end would be left for the next advance.
_END_SLACK = 1e-3

#: Real seconds without any progress after which runs in flight that make no model call are
#: taken to be waiting on the simulated clock for something else (a supervisor's restart
#: delay after a crash): the clock is then moved to its next deadline, and it is counted.
STALL_SECONDS = 5.0


class ModelCallGate:
    """Tells the compressed-time driver when runs in flight wait only for simulated time.

    Two views of one :class:`~companyd.clock.ManualClock`:

    * the gate itself is a :class:`~companyd.clock.Clock` (same readings; ``sleep`` is
      counted) — give it to the model backend for its retry backoff;
    * :meth:`backend` wraps the model backend and counts the calls in flight.

    When every call in flight is sleeping on the clock (:attr:`may_advance`), nothing but
    simulated time can move the runs on: :func:`advance` moves the clock to the earliest end
    of those sleeps (or the scheduler's next wakeup, if sooner). Otherwise — a call waiting
    for the HTTP server, a tool running, the journal being written — simulated time stands
    still. ``stalls`` counts the times the driver had to move the clock with runs in flight
    and no model call at all (see :data:`STALL_SECONDS`).
    """

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self.calls = 0  # model calls in flight
        self.sleeping = 0  # of them, waiting on the clock
        self.slept = 0.0  # simulated seconds of backoff, in total
        self.stalls = 0
        self._deadlines: Counter[float] = Counter()
        self.changed = asyncio.Event()

    # -- Clock --------------------------------------------------------------------------

    def monotonic(self) -> float:
        """The wrapped clock's monotonic reading."""
        return self._clock.monotonic()

    def time(self) -> float:
        """The wrapped clock's wall-clock reading."""
        return self._clock.time()

    async def sleep(self, seconds: float) -> None:
        """Sleep on the wrapped clock, counted in :attr:`sleeping` (with its deadline) until it
        ends, and in :attr:`slept`; sets :attr:`changed` so the driver looks again.
        """
        deadline = self._clock.monotonic() + max(0.0, seconds)
        self.sleeping += 1
        self._deadlines[deadline] += 1
        self.slept += max(0.0, seconds)
        self.changed.set()
        try:
            await self._clock.sleep(seconds)
        finally:
            self.sleeping -= 1
            self._deadlines[deadline] -= 1
            if not self._deadlines[deadline]:
                del self._deadlines[deadline]
            self.changed.set()

    # -- the backend --------------------------------------------------------------------

    def backend(self, inner: ModelBackend) -> ModelBackend:
        """``inner`` with its calls counted (it must sleep on this gate, not on the clock)."""
        return _GatedBackend(inner, self)

    @property
    def may_advance(self) -> bool:
        """Whether every model call in flight is sleeping on the clock (and there is one)."""
        return self.calls > 0 and self.sleeping >= self.calls

    def next_deadline(self) -> float | None:
        """The monotonic reading at which the earliest of those sleeps ends."""
        return min(self._deadlines, default=None)


class _GatedBackend:
    def __init__(self, inner: ModelBackend, gate: ModelCallGate) -> None:
        self._inner = inner
        self._gate = gate

    async def create(
        self,
        request: ModelRequest,
        *,
        before_retry: RetryHook | None = None,
        on_send: Callable[[], None] | None = None,
    ) -> ModelResponse:
        gate = self._gate
        gate.calls += 1
        gate.changed.set()
        try:
            return await self._inner.create(request, before_retry=before_retry, on_send=on_send)
        finally:
            gate.calls -= 1
            gate.changed.set()

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _settle_gated(
    scheduler: RoutineScheduler, clock: ManualClock, gate: ModelCallGate
) -> bool:
    """Return once nothing is due now and either no fire is in flight (False) or every model
    call in flight sleeps on the clock (True).
    """
    while True:
        await scheduler.settle(runs=False)
        busy = scheduler.in_flight
        if not busy:
            return False
        if gate.may_advance:
            return True
        gate.changed.clear()
        changed = asyncio.ensure_future(gate.changed.wait())
        try:
            done, _ = await asyncio.wait(
                busy | {changed}, timeout=STALL_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            changed.cancel()
        deadline = clock.next_deadline()
        if not done and gate.calls == 0 and deadline is not None:
            gate.stalls += 1
            clock.advance(max(0.0, deadline - clock.monotonic()))


async def _advance_gated(
    scheduler: RoutineScheduler, clock: ManualClock, seconds: float, gate: ModelCallGate
) -> None:
    end = clock.monotonic() + seconds
    waiting = await _settle_gated(scheduler, clock, gate)
    while True:
        now = clock.monotonic()
        wake = scheduler.next_wakeup
        if waiting:
            # Runs are in flight and all of them wait for simulated time: move to the first
            # moment one of them (or the scheduler) wakes — past the end if need be, so that
            # every run started before the end also ends.
            target = gate.next_deadline()
            assert target is not None
            if wake is not None:
                target = min(target, now + wake)
            if now < end:
                target = min(target, end)
        elif now >= end:
            if wake is None or wake > _END_SLACK:
                return
            target = now + wake  # due at the end but for float rounding
        else:
            target = end if wake is None else min(end, now + wake)
        clock.advance(max(0.0, target - now))
        waiting = await _settle_gated(scheduler, clock, gate)


async def advance(
    scheduler: RoutineScheduler,
    clock: ManualClock,
    seconds: float,
    *,
    max_step: float | None = None,
    runs: bool = True,
    gate: ModelCallGate | None = None,
) -> None:
    """Move ``clock`` forward by ``seconds``, stopping wherever something sleeping on it
    wakes up — the scheduler, or a sink that waits on the clock — and letting the scheduler
    finish what is due there (see :meth:`RoutineScheduler.settle`; ``runs=False`` leaves runs
    blocked in the sink alone).

    With a ``gate`` it stops only at the scheduler's wakeups and at the ends of the model
    backend's sleeps (other sleepers wake late, when the clock passes them), moves the clock
    while runs are in flight only when the gate allows it (:class:`ModelCallGate`), and
    returns when no fire is in flight — possibly a little after ``seconds``, when a run in
    flight at the end still had to wait out a retry backoff.
    """
    if gate is not None:
        await _advance_gated(scheduler, clock, seconds, gate)
        return
    end = clock.monotonic() + seconds
    await scheduler.settle(runs=runs)
    while (remaining := end - clock.monotonic()) > 0 or (
        (wake := scheduler.next_wakeup) is not None and wake <= _END_SLACK
    ):
        step = max(remaining, 0.0)
        deadline = clock.next_deadline()
        if deadline is not None and deadline > clock.monotonic():
            step = min(step, deadline - clock.monotonic())
        wake = scheduler.next_wakeup
        if wake is not None and wake > 0:
            step = min(step, wake)
        if max_step is not None:
            step = min(step, max_step)
        clock.advance(step)
        await scheduler.settle(runs=runs)


class FlakySink:
    """A stand-in agent runtime whose model calls fail transiently at ``failure_rate``.

    Each run makes up to ``attempts`` model calls (``attempts=1``: no retry); a call fails with
    HTTP 529 (overloaded) or 500 (internal error), chosen at random. A run whose calls all
    fail ends ``failed`` with the last error as its reason; a successful run costs
    ``cost_usd`` and, when ``writes_memory``, changes the company memory (so a
    ``memory_changed`` heartbeat has something to look at). Runs take no simulated time.

    Args:
        failure_rate: probability that one model call fails.
        attempts: model calls per run before giving up.
        seed: for a reproducible run.
    """

    def __init__(
        self,
        *,
        failure_rate: float = 0.2,
        attempts: int = 1,
        seed: int = 0,
        cost_usd: float = 0.002,
        writes_memory: bool = True,
        clock: ManualClock | None = None,
    ) -> None:
        self.failure_rate = failure_rate
        self.attempts = attempts
        self.cost_usd = cost_usd
        self.writes_memory = writes_memory
        self._rng = random.Random(seed)
        self._clock = clock
        self.memory_version = 0
        self.inboxes: Counter[str] = Counter()
        self.tasks: list[Task] = []
        self.calls = 0
        self.failed_calls = 0

    async def submit(self, task: Task) -> RunOutcome:
        """One run of ``task``, at once: ``failed`` with the last injected error if all
        ``attempts`` calls fail, else ``ok`` at ``cost_usd`` (and a memory change when
        ``writes_memory``). Never raises.
        """
        self.tasks.append(task)
        now = self._clock.time() if self._clock else time.time()
        error = None
        for _ in range(self.attempts):
            self.calls += 1
            if self._rng.random() >= self.failure_rate:
                error = None
                break
            self.failed_calls += 1
            error = self._rng.choice(
                ("HTTP 529 overloaded_error (injected)", "HTTP 500 api_error (injected)")
            )
        if error is not None:
            return RunOutcome(
                task_id=task.id,
                run_id=new_id("run"),
                agent=task.agent,
                status=RunStatus.FAILED,
                started=now,
                ended=now,
                reason=f"model call failed {self.attempts}× in a row; last: {error}",
            )
        if self.writes_memory:
            self.memory_version += 1
        return RunOutcome(
            task_id=task.id,
            run_id=new_id("run"),
            agent=task.agent,
            status=RunStatus.OK,
            started=now,
            ended=now,
            answer="done",
            cost_usd=self.cost_usd,
            steps=1,
        )

    def inbox_size(self, agent: str) -> int:
        """The count recorded in :attr:`inboxes` for ``agent`` (0 unless a test set it)."""
        return self.inboxes[agent]

    def rate_limited_until(self, agent: str) -> float | None:
        """Never: the simulated agents meet no quota wall."""
        return None

    async def memory_marker(self) -> str:
        """:attr:`memory_version` as text: it changes with every successful run that writes
        memory.
        """
        return str(self.memory_version)

    def resumed(self, task_id: str) -> Awaitable[RunOutcome] | None:
        """Always None: the stand-in keeps no journal, so no run outlives a stop."""
        return None  # no journal: nothing outlives a stop

    async def ended_outcome(self, task_id: str) -> RunOutcome | None:
        """Always None: the stand-in keeps no journal."""
        return None


@dataclass
class RoutineSimStats:
    """One routine over a simulated run."""

    routine: str
    due: int = 0  # fire times the schedule says happened
    recorded: int = 0  # fire times the history accounts for
    outcomes: Counter[str] = field(default_factory=Counter)
    cost_usd: float = 0.0

    @property
    def due_runs(self) -> int:
        """Fire times that count for the success rate (everything but idle)."""
        return self.recorded - self.outcomes["idle"]

    @property
    def success_rate(self) -> float | None:
        """The share of :attr:`due_runs` that ended ``ok``, or None when there were none."""
        return self.outcomes["ok"] / self.due_runs if self.due_runs else None


@dataclass
class SimReport:
    """The audit of a simulated run (see :func:`simulate`)."""

    start: float
    end: float
    routines: dict[str, RoutineSimStats]
    missing: list[tuple[str, str]]  # (routine, ISO fire time) with no history row
    duplicates: list[tuple[str, str]]  # (routine, ISO fire time) with more than one row
    unexplained: list[db.FireRecord]  # not ok/idle and no reason
    non_success: list[db.FireRecord]
    events: Counter[str]
    submitted: int
    wall_seconds: float

    @property
    def due(self) -> int:
        """Fire times due over the run, every routine together."""
        return sum(s.due for s in self.routines.values())

    @property
    def due_runs(self) -> int:
        """Fire times that count for the success rate (everything but idle), every routine
        together.
        """
        return sum(s.due_runs for s in self.routines.values())

    @property
    def ok(self) -> int:
        """Fires that ended ``ok``, every routine together."""
        return sum(s.outcomes["ok"] for s in self.routines.values())

    @property
    def success_rate(self) -> float | None:
        """:attr:`ok` over :attr:`due_runs`, or None when there were none."""
        return self.ok / self.due_runs if self.due_runs else None

    @property
    def complete(self) -> bool:
        """Every due fire time has exactly one row and every non-success has a reason."""
        return not (self.missing or self.duplicates or self.unexplained)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-serialisable dict (times as ISO 8601 UTC), as the benchmarks
        record it.
        """
        return {
            "start": utc_from_ts(self.start).isoformat(),
            "end": utc_from_ts(self.end).isoformat(),
            "due": self.due,
            "due_runs": self.due_runs,
            "ok": self.ok,
            "success_rate": self.success_rate,
            "complete": self.complete,
            "missing": self.missing,
            "duplicates": self.duplicates,
            "unexplained": [r.to_dict() for r in self.unexplained],
            "non_success_reasons": dict(Counter(_reason_class(r) for r in self.non_success)),
            "events": dict(self.events),
            "submitted": self.submitted,
            "wall_seconds": self.wall_seconds,
            "routines": {
                s.routine: {
                    "due": s.due,
                    "recorded": s.recorded,
                    "outcomes": dict(s.outcomes),
                    "success_rate": s.success_rate,
                    "cost_usd": round(s.cost_usd, 6),
                }
                for s in self.routines.values()
            },
        }


def _reason_class(rec: db.FireRecord) -> str:
    reason = rec.reason or "(none)"
    return f"{rec.outcome}: {reason.split(';')[0][:80]}"


class _CountingSink:
    def __init__(self, inner: TaskSink) -> None:
        self.inner = inner
        self.submitted = 0

    async def submit(self, task: Task) -> RunOutcome:
        self.submitted += 1
        return await self.inner.submit(task)

    def inbox_size(self, agent: str) -> int:
        return self.inner.inbox_size(agent)

    def rate_limited_until(self, agent: str) -> float | None:
        return self.inner.rate_limited_until(agent)

    async def memory_marker(self) -> str:
        return await self.inner.memory_marker()

    def resumed(self, task_id: str) -> Awaitable[RunOutcome] | None:
        return self.inner.resumed(task_id)

    async def ended_outcome(self, task_id: str) -> RunOutcome | None:
        return await self.inner.ended_outcome(task_id)


async def simulate(
    config: CompanyConfig,
    days: float,
    sink: TaskSink,
    clock: ManualClock,
    *,
    state_dir: Path,
    bus: EventBus | None = None,
    downtime: Sequence[tuple[float, float]] = (),
    wait_for_runs: bool = True,
    gate: ModelCallGate | None = None,
) -> SimReport:
    """Run ``config``'s routines for ``days`` on ``clock`` and audit the history.

    Args:
        config: the company (its enabled routines are scheduled).
        days: simulated duration, starting at the clock's current time.
        sink: runs the tasks; it must not wait on ``clock``.
        clock: the simulated time; moved forward by this function.
        state_dir: where routines.sqlite goes (use a fresh directory per run).
        bus: event bus (default: a new one on ``clock``); events are counted per kind.
        downtime: ``(down_at, up_at)`` offsets in seconds from the start: the scheduler is
            stopped at ``down_at`` and a new one (same state dir) started at ``up_at`` —
            a daemon restart, with catch-up.
        wait_for_runs: True (default): simulated time stands still while a run is in
            progress (runs take zero simulated time; the sink must not sleep on ``clock``).
            False: time moves on from wakeup to wakeup regardless — for a runtime that
            sleeps on ``clock`` itself (retry backoff); runs still in progress at a restart or
            at the end are then stopped and recorded ``cancelled``.
        gate: for a runtime that sleeps on ``clock`` between model-call attempts (see
            :class:`ModelCallGate`); runs in flight at a restart or at the end are then
            finished first. Implies ``wait_for_runs``.
    """
    if gate is not None and not wait_for_runs:
        raise ValueError(
            "a gate keeps simulated time still while runs work; it needs wait_for_runs=True"
        )
    bus = bus or EventBus(clock)
    events: Counter[str] = Counter()
    remove = bus.add_listener(lambda e: events.update([e.kind]))
    counting = _CountingSink(sink)
    started_wall = time.perf_counter()
    start = clock.time()
    end = start + days * 86400.0

    def make() -> RoutineScheduler:
        return RoutineScheduler(
            config, counting, state_dir=state_dir, bus=bus, clock=clock, max_sleep=None
        )

    sched = make()
    await sched.start()
    sched.take_owed_backups()  # as run() does once ready
    try:
        for down_at, up_at in sorted(downtime):
            await advance(
                sched, clock, start + down_at - clock.time(), runs=wait_for_runs, gate=gate
            )
            await sched.stop(drain=wait_for_runs)
            clock.advance(max(0.0, start + up_at - clock.time()))
            sched = make()
            await sched.start()
            sched.take_owed_backups()
        await advance(sched, clock, end - clock.time(), runs=wait_for_runs, gate=gate)
    finally:
        await sched.stop(drain=wait_for_runs)
        remove()
    if not wait_for_runs:
        # The stop left the fires of runs still in progress open (a daemon's next start
        # closes them with the resumed run's outcome); a simulated runtime does not resume
        # them, so they end here.
        end_store = db.RoutineStore(sched.db_path)
        await end_store.open()
        try:
            ended = clock.time()
            await end_store.call(
                lambda c: db.close_interrupted(
                    c, ended, "cancelled: the simulation ended before the run did"
                )
            )
        finally:
            await end_store.close()
    wall = time.perf_counter() - started_wall

    conn = db.open_readonly(sched.db_path)
    assert conn is not None
    try:
        records = db.fires_between(conn, start, end)
    finally:
        conn.close()
    return _audit(config, records, start, end, events, counting.submitted, wall)


def _audit(
    config: CompanyConfig,
    records: list[db.FireRecord],
    start: float,
    end: float,
    events: Counter[str],
    submitted: int,
    wall: float,
) -> SimReport:
    stats = {s: RoutineSimStats(routine=s) for s, r in config.routines.items() if r.enabled}
    triggers = {s: build_trigger(config.routines[s]) for s in stats}
    seen: Counter[tuple[str, float]] = Counter()
    for rec in records:
        if rec.kind == "manual" or rec.routine not in stats:
            continue
        st = stats[rec.routine]
        st.recorded += rec.fires
        st.outcomes[rec.outcome or "open"] += rec.fires
        st.cost_usd += rec.cost_usd
        times: list[float] = [rec.scheduled]
        if rec.fires > 1:  # one row standing for a long outage: expand it
            more = fire_times(
                triggers[rec.routine], utc_from_ts(rec.scheduled), utc_from_ts(end), rec.fires - 1
            )
            times += [t.timestamp() for t in more]
        for ts in times:
            seen[(rec.routine, round(ts, 6))] += 1
    missing: list[tuple[str, str]] = []
    duplicates: list[tuple[str, str]] = []
    for slug, st in stats.items():
        due = fire_times(triggers[slug], utc_from_ts(start), utc_from_ts(end))
        st.due = len(due)
        for t in due:
            n = seen[(slug, round(t.timestamp(), 6))]
            if n == 0:
                missing.append((slug, t.isoformat()))
            elif n > 1:
                duplicates.append((slug, t.isoformat()))
    non_success = [r for r in records if r.kind != "manual" and r.outcome not in ("ok", "idle")]
    unexplained = [r for r in non_success if not r.reason]
    return SimReport(
        start=start,
        end=end,
        routines=stats,
        missing=missing,
        duplicates=duplicates,
        unexplained=unexplained,
        non_success=non_success,
        events=events,
        submitted=submitted,
        wall_seconds=wall,
    )
