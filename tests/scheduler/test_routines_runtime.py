"""Routines through the real agent runtime, in compressed time.

The example company.yaml's routines run for simulated days: the scheduler hands each fire
to the agents (real memory, spend, journal), which call Claude through ClaudeBackend and
the real SDK over loopback HTTP to the Messages API stand-in, which fails 20 % of the calls
with 529 or 500. The slow version (30 days) is bench/bench_routines_30d.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.config import load_config, load_config_text
from companyd.testing.messages_api import MessagesAPIServer
from companyd.testing.sim_runtime import RoutineResponder, simulate_company

from .conftest import company_text, ts

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).resolve().parents[2] / "company.yaml"
DAY = 86400.0


async def test_two_days_of_the_example_company_with_failures_and_a_restart(
    tmp_path: Path,
) -> None:
    config = load_config(EXAMPLE)
    # From Sunday 28 Feb: month-close fires on 1 March, the weekly review on Monday 1 March.
    clock = ManualClock(start=ts("2027-02-28T00:00:00"))
    with MessagesAPIServer(responder=RoutineResponder(), fault_rate=0.2, seed=11) as server:
        async with asyncio.timeout(60):
            report = await simulate_company(
                config,
                2,
                server,
                clock,
                state_dir=tmp_path / "state",
                # Down 13:55–14:10 on the first day: daily-post's 14:00 is caught up at start.
                downtime=((13 * 3600 + 55 * 60, 14 * 3600 + 10 * 60),),
            )
    sim = report.sim
    # Every due fire time has exactly one history row; every non-success says why.
    assert sim.complete, sim.to_dict()
    for stats in sim.routines.values():
        assert stats.recorded == stats.due
    assert sim.non_success and all(r.reason for r in sim.non_success)
    # The only non-successes are heartbeats that fell in the downtime (catch_up: skip).
    assert {(r.routine, r.outcome) for r in sim.non_success} == {("heartbeat", "missed")}
    assert all("daemon was down" in (r.reason or "") for r in sim.non_success)
    post = sim.routines["daily-post"]
    assert post.due == 2 and post.outcomes["ok"] == 2  # 14:00 on day 1 ran at the restart
    assert sim.routines["month-close"].outcomes["ok"] == 1  # reviewed by the CFO
    assert sim.routines["weekly-spend-review"].outcomes["ok"] == 1
    # The heartbeat runs only after memory changed: idle (no task, $0) the rest of the time.
    beat = sim.routines["heartbeat"]
    assert 1 <= beat.outcomes["ok"] <= 4 and beat.outcomes["idle"] > 500
    assert sim.submitted == sum(s.outcomes["ok"] for s in sim.routines.values())
    # The stand-in really failed calls; retries and fallback absorbed them. Every call it
    # served is one completed step in the run journal and one call in the spend ledger.
    assert report.injected_faults > 0
    assert report.requests == report.served + report.injected_faults
    assert report.calls_match, report.to_dict()["model_calls"]
    assert report.served >= 2 * sim.submitted  # record in memory, then answer
    assert report.runs == {"ok": sim.submitted + 1}  # + the CFO's review of month-close
    assert report.backoff_seconds > 0  # the retry backoff slept on the simulated clock
    assert report.stalls == 0
    # What the fires cost is what the ledger booked, but for the CFO's review of month-close
    # (a run of its own, booked outside the routine).
    fires_cost = sum(s.cost_usd for s in sim.routines.values())
    assert 0 < fires_cost < report.spent_usd < 2 * fires_cost


async def test_a_run_whose_every_call_fails_is_recorded_failed_with_why(tmp_path: Path) -> None:
    config = load_config_text(
        company_text(
            """\
            daily-post:
              assignee: marketing
              description: Post.
              trigger: {cron: "0 14 * * *"}
            """
        )
        + "anthropic: {max_retries: 2}\n"
        + "defaults:\n  model: {primary: claude-sonnet-5-5, fallbacks: [claude-haiku-5-5]}\n"
    )
    clock = ManualClock(start=ts("2027-01-04T13:00:00"))
    with MessagesAPIServer(responder=RoutineResponder(), fault_rate=1.0, seed=3) as server:
        async with asyncio.timeout(60):
            report = await simulate_company(
                config, 2 / 24, server, clock, state_dir=tmp_path / "state"
            )
    sim = report.sim
    assert sim.complete
    [row] = sim.non_success
    assert (row.routine, row.outcome) == ("daily-post", "failed")
    reason = row.reason or ""
    assert "every model in the chain failed" in reason
    assert "claude-sonnet-5-5" in reason and "claude-haiku-5-5" in reason
    assert sim.events["routine_failed"] == 1
    # Three attempts on each model of the chain, then the run gave up; nothing was served,
    # so nothing was journaled or paid.
    assert report.requests == report.injected_faults == 6
    assert report.fallbacks == 1
    assert (report.served, report.journal_llm_steps, report.ledger_calls) == (0, 0, 0)
    assert report.runs == {"failed": 1}
    # Two waits per model (0.5 s and 1 s, less jitter), all on the simulated clock.
    assert 2 * (0.375 + 0.75) <= report.backoff_seconds <= 2 * 1.5
