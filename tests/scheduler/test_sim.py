"""The compressed-time harness on the example company: every due fire is accounted for."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.config import load_config
from companyd.runs import RunOutcome, Task
from companyd.scheduler._sim import FlakySink, ModelCallGate, simulate

from .conftest import ts

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).resolve().parents[2] / "company.yaml"


async def test_three_days_with_failures_and_a_restart_leave_nothing_unexplained(
    tmp_path: Path,
) -> None:
    config = load_config(EXAMPLE)
    clock = ManualClock(start=ts("2027-02-27T00:00:00"))  # month-close fires on 03-01
    sink = FlakySink(failure_rate=0.2, attempts=1, seed=7, clock=clock)
    day = 86400.0
    async with asyncio.timeout(60):
        report = await simulate(
            config,
            3,
            sink,
            clock,
            state_dir=tmp_path / "state",
            # Down on the second day from 13:55 to 14:10 (the 14:00 routine's catch-up case).
            downtime=[(day + 13 * 3600 + 55 * 60, day + 14 * 3600 + 10 * 60)],
        )
    assert report.complete, report.to_dict()
    assert report.missing == [] and report.duplicates == [] and report.unexplained == []
    enabled = [s for s, r in config.routines.items() if r.enabled]
    assert set(report.routines) == set(enabled)
    for stats in report.routines.values():
        assert stats.recorded == stats.due  # one row per due fire time, no more, no less
    # Failures are the sink's, with its reason; misses are the restart's, with theirs.
    failed = [r for r in report.non_success if r.outcome == "failed"]
    assert failed and all("injected" in (r.reason or "") for r in failed)
    missed = [r for r in report.non_success if r.outcome == "missed"]
    assert missed and all("daemon was down" in (r.reason or "") for r in missed)
    assert report.events["routine_failed"] == len(failed)
    assert report.events["routine_missed"] >= 1
    # Every task handed over is a row with a run; idle heartbeats cost nothing.
    ran = sum(
        n
        for s in report.routines.values()
        for o, n in s.outcomes.items()
        if o not in ("idle", "missed", "skipped")
    )
    assert report.submitted == ran == len(sink.tasks)
    heartbeat = report.routines.get("heartbeat")
    if heartbeat is not None:
        assert heartbeat.outcomes["idle"] > heartbeat.due / 2
    ok_runs = report.ok
    assert sum(s.cost_usd for s in report.routines.values()) == pytest.approx(
        ok_runs * sink.cost_usd
    )


class SleepySink(FlakySink):
    """A runtime that waits on the simulated clock itself (a 90 s retry backoff per run)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(failure_rate=0.0, clock=clock)
        self.clock = clock

    async def submit(self, task: Task) -> RunOutcome:
        await self.clock.sleep(90)
        return await super().submit(task)


async def test_a_runtime_sleeping_on_the_simulated_clock(tmp_path: Path) -> None:
    from .conftest import company

    config = company(
        """\
        hourly: {assignee: coo, description: Work., trigger: {every: 1h}}
        often: {assignee: coo, description: Work., trigger: {every: 1m}}
        """
    )
    clock = ManualClock(start=ts("2027-01-04T00:00:30"))
    sink = SleepySink(clock)
    async with asyncio.timeout(60):
        # Until 06:04:00: the 06:00 run has ended, the 06:03 one is still sleeping.
        report = await simulate(
            config,
            (6 * 3600 + 210) / 86400,
            sink,
            clock,
            state_dir=tmp_path / "s",
            wait_for_runs=False,
        )
    assert report.complete, report.to_dict()
    hourly = report.routines["hourly"]
    assert hourly.due == 6 and hourly.outcomes == {"ok": 6}
    often = report.routines["often"]
    assert often.due == 364
    # Each run takes 90 simulated seconds, so every other minute overlaps and is skipped;
    # the run in progress at the end is stopped and recorded.
    assert often.outcomes == {"ok": 181, "skipped": 182, "cancelled": 1}


async def test_manual_clock_next_deadline() -> None:
    clock = ManualClock()
    assert clock.next_deadline() is None
    a = asyncio.ensure_future(clock.sleep(30))
    b = asyncio.ensure_future(clock.sleep(10))
    await asyncio.sleep(0)
    assert clock.next_deadline() == 10
    b.cancel()
    await asyncio.sleep(0)
    assert clock.next_deadline() == 30  # a cancelled sleep no longer counts
    clock.advance(30)
    async with asyncio.timeout(5):
        await a
    assert clock.next_deadline() is None


class GatedSink(FlakySink):
    """A runtime whose model call waits 30 simulated seconds (a retry backoff) through the
    gate, as ClaudeBackend does; without the gate it would wait forever.
    """

    def __init__(self, clock: ManualClock, gate: ModelCallGate) -> None:
        super().__init__(failure_rate=0.0, clock=clock)
        self.gate = gate
        self.spans: list[tuple[float, float]] = []

    async def submit(self, task: Task) -> RunOutcome:
        began = self.gate.time()
        self.gate.calls += 1  # what ModelCallGate.backend() counts
        try:
            await self.gate.sleep(30)
        finally:
            self.gate.calls -= 1
        self.spans.append((began, self.gate.time()))
        return await super().submit(task)


async def test_a_gate_lets_time_move_only_while_every_call_sleeps(tmp_path: Path) -> None:
    from .conftest import company

    config = company(
        """\
        often: {assignee: coo, description: Work., trigger: {every: 1m}}
        """
    )
    clock = ManualClock(start=ts("2027-01-04T00:00:00"))
    gate = ModelCallGate(clock)
    sink = GatedSink(clock, gate)
    async with asyncio.timeout(30):
        report = await simulate(config, 10 / 1440, sink, clock, state_dir=tmp_path / "s", gate=gate)
    assert report.complete, report.to_dict()
    assert report.routines["often"].outcomes == {"ok": 10}
    assert [round(b - a) for a, b in sink.spans] == [30] * 10  # the backoff took sim time
    assert gate.slept == 300 and gate.stalls == 0
    assert clock.time() == ts("2027-01-04T00:10:30")  # the last run (at 00:10) finished


async def test_runs_stuck_on_the_clock_outside_model_calls_are_moved_on_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from companyd.scheduler import _sim as sim

    from .conftest import company

    monkeypatch.setattr(sim, "STALL_SECONDS", 0.05)
    config = company(
        """\
        hourly: {assignee: coo, description: Work., trigger: {every: 1h}}
        """
    )
    clock = ManualClock(start=ts("2027-01-04T00:30:00"))
    gate = ModelCallGate(clock)
    async with asyncio.timeout(30):
        report = await simulate(
            config, 2 / 24, SleepySink(clock), clock, state_dir=tmp_path / "s", gate=gate
        )
    assert report.routines["hourly"].outcomes == {"ok": 2}
    assert gate.stalls == 2  # each run's 90 s sleep was not a model call: told, not hidden


class JitterySink(FlakySink):
    """Each run sleeps out ten 0.1 s backoffs on the gate: not exactly representable, so the
    clock's wall reading drifts below its monotonic one by float rounding.
    """

    def __init__(self, clock: ManualClock, gate: ModelCallGate) -> None:
        super().__init__(failure_rate=0.0, clock=clock)
        self.gate = gate

    async def submit(self, task: Task) -> RunOutcome:
        self.gate.calls += 1
        try:
            for _ in range(10):
                await self.gate.sleep(0.1)
        finally:
            self.gate.calls -= 1
        return await super().submit(task)


@pytest.mark.parametrize("slack", [None, 0.0])
async def test_the_fire_time_at_the_very_end_is_served_despite_rounding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slack: float | None
) -> None:
    from companyd.scheduler import _sim as sim

    from .conftest import company

    if slack is not None:  # without the slack: the bug this guards against
        monkeypatch.setattr(sim, "_END_SLACK", slack)
    config = company(
        """\
        often: {assignee: coo, description: Work., trigger: {every: 1m}}
        """
    )
    clock = ManualClock(start=ts("2027-01-04T00:00:00"))
    gate = ModelCallGate(clock)
    async with asyncio.timeout(30):
        report = await simulate(
            config, 30 / 1440, JitterySink(clock, gate), clock, state_dir=tmp_path / "s", gate=gate
        )
    assert clock.monotonic() - (clock.time() - ts("2027-01-04T00:00:00")) > 0  # it drifted
    if slack is None:
        assert report.complete and report.routines["often"].outcomes == {"ok": 30}
    else:
        assert report.missing == [("often", "2027-01-04T00:30:00+00:00")]


async def test_a_backup_missed_in_a_simulated_outage_is_accounted_for_as_the_start_takes_it(
    tmp_path: Path,
) -> None:
    """The simulator restarts the scheduler as the daemon does: the backup it owes at start
    is taken (and, with no BackupSink in a simulation, fails saying so) — the fire time is
    recorded, not lost between the plan that owed it and a start that never took it.
    """
    from .conftest import company

    config = company(f"nightly: {{backup: {{every: 1d, to: {tmp_path / 'backups'}}}}}\n")
    clock = ManualClock(start=ts("2027-01-04T12:00:00"))
    hour = 3600.0
    async with asyncio.timeout(30):
        report = await simulate(
            config,
            2,
            FlakySink(failure_rate=0.0, attempts=1, seed=1, clock=clock),
            clock,
            state_dir=tmp_path / "state",
            downtime=[(11 * hour, 13 * hour)],  # down over 2027-01-05T00:00
        )
    assert report.missing == [] and report.duplicates == [], report.to_dict()
    [taken] = [r for r in report.non_success if r.kind == "catch_up"]
    assert taken.scheduled == ts("2027-01-05T00:00:00")
    assert "not available in this process" in (taken.reason or "")
    assert "was missed: the daemon was down at its time; taken at start" in (taken.reason or "")
