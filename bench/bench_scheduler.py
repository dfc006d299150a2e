"""Scheduler benchmarks.

1. **Fire-time lateness, real clock.** 1,000 routines run through the whole RoutineScheduler
   — clocked APScheduler, cursor committed to routines.sqlite before the task is handed over,
   history row, instant sink. Lateness = when the task reached the sink minus its fire time.
   Two loads: *spread* (intervals 20 s + i × 20 ms: fire times all over the grid, ~35 fires
   a second, a few at a time) and *burst* (every routine every 5 s: all 1,000 due at the
   same instant, the worst case; 12 bursts, each also judged on its own). Baseline in the
   same run: plain APScheduler 3 ``AsyncIOScheduler`` with the same 1,000 schedules as
   trivial coroutine jobs (no persistence, no history). Target: p99 < 100 ms.

2. **Compressed time.** ``companyd.scheduler._sim.simulate``: the example company.yaml for 30
   simulated days against a stand-in runtime whose model calls fail transiently (HTTP
   529/500) 20 % of the time, with 1 attempt per run (no retry) and with 5 (a runtime that
   retries). Plus a dense variant (10 routines every 30 min) so the success rate is measured
   over 14,400 runs, and both again with three daemon restarts (one across daily-post's
   14:00, one six hours long). Reports success rate and whether every due fire time has
   exactly one history row and every non-success a reason.

Run: ``.venv/bin/python bench/bench_scheduler.py [--quick] [--json]
[--only lateness|burst|compressed]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from companyd._heap import freeze_startup_heap
from companyd.clock import ManualClock, SystemClock
from companyd.config import CompanyConfig, load_config, load_config_text
from companyd.events import EventBus
from companyd.runs import RunOutcome, RunStatus, Task, new_id
from companyd.scheduler import _store as db
from companyd.scheduler._service import RoutineScheduler
from companyd.scheduler._sim import FlakySink, SimReport, simulate

ROOT = Path(__file__).resolve().parents[1]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


def company_with(routines: str) -> CompanyConfig:
    head = (
        "schema: companyd/v1\n"
        "company: {name: Bench, timezone: UTC, budget: {monthly_usd: 100}}\n"
        "agents:\n"
        "  ceo: {title: CEO, instructions: Lead.}\n"
        "  ops: {title: Ops, reportsTo: ceo, instructions: Operate.}\n"
        "routines:\n"
    )
    return load_config_text(head + routines)


class InstantSink:
    """Records when each task reached it (wall clock) and answers ok one loop turn later.

    One turn, not zero: every real runtime suspends in ``submit`` (Staff.submit journals the
    task in a thread first), so the scheduler's bookkeeping after a run never sits between
    one hand-over and the next. Answering synchronously put 1,000 runs' bookkeeping inside
    a burst's hand-overs (~10 ms at p99 here).
    """

    def __init__(self) -> None:
        self.arrivals: list[float] = []

    async def submit(self, task: Task) -> RunOutcome:
        now = time.time()
        self.arrivals.append(now)
        await asyncio.sleep(0)
        return RunOutcome(
            task_id=task.id,
            run_id=new_id("run"),
            agent=task.agent,
            status=RunStatus.OK,
            started=now,
            ended=now,
        )

    def inbox_size(self, agent: str) -> int:
        return 0

    def rate_limited_until(self, agent: str) -> float | None:
        return None

    async def memory_marker(self) -> str:
        return "m"

    def resumed(self, task_id: str) -> None:
        return None

    async def ended_outcome(self, task_id: str) -> None:
        return None


def intervals(kind: str, n: int) -> list[float]:
    """``burst``: every routine every 5 s (all due at once); ``spread``: 20 s + i × 20 ms,
    so fire times fall all over the grid, a few at a time.
    """
    if kind == "burst":
        return [5.0] * n
    return [round(20.0 + i * 0.02, 3) for i in range(n)]


async def lateness_companyd(kind: str, n: int, seconds: float) -> dict[str, Any]:
    periods = intervals(kind, n)
    routines = "".join(
        f"  r{i:04d}: {{assignee: ops, description: Tick., trigger: {{every: {p}s}}}}\n"
        for i, p in enumerate(periods)
    )
    config = company_with(routines)
    sink = InstantSink()
    with tempfile.TemporaryDirectory() as d:
        sched = RoutineScheduler(
            config, sink, state_dir=Path(d), bus=EventBus(), clock=SystemClock()
        )
        await sched.start()
        freeze_startup_heap()  # as `companyd run` does once started
        # Skip the first fires (a cold process), then measure for ``seconds``.
        first = time.time() + 6.0
        end = first + seconds
        await asyncio.sleep(end - time.time())
        await sched.settle()
        await sched.stop()
        gc.unfreeze()
        conn = db.open_readonly(sched.db_path)
        assert conn is not None
        rows = [r for r in db.fires_between(conn, first, end) if r.outcome == "ok"]
        conn.close()
    submit = [(r.started or 0) - r.scheduled for r in rows]
    dispatch = [(r.fired or 0) - r.scheduled for r in rows]
    return {
        "fires": len(rows),
        "p50_ms": 1000 * quantile(submit, 0.5),
        "p99_ms": 1000 * quantile(submit, 0.99),
        "max_ms": 1000 * max(submit),
        "dispatch_p50_ms": 1000 * quantile(dispatch, 0.5),
        "dispatch_p99_ms": 1000 * quantile(dispatch, 0.99),
        **per_instant([(r.scheduled, (r.started or 0) - r.scheduled) for r in rows]),
    }


def per_instant(samples: list[tuple[float, float]]) -> dict[str, Any]:
    """The p99 of each fire instant (a burst) on its own: on a shared machine one burst that
    meets a preempted CPU or a full collection decides the p99 of all fires.
    """
    by: dict[float, list[float]] = {}
    for when, late in samples:
        by.setdefault(round(when, 3), []).append(late)
    p99s = sorted(1000 * quantile(v, 0.99) for v in by.values() if len(v) >= 100)
    if not p99s:
        return {}
    return {
        "bursts": len(p99s),
        "burst_p99_ms_median": p99s[len(p99s) // 2],
        "burst_p99_ms_best": p99s[0],
        "burst_p99_ms_worst": p99s[-1],
        "bursts_under_100ms": sum(1 for p in p99s if p < 100.0),
    }


async def lateness_apscheduler(kind: str, n: int, seconds: float) -> dict[str, Any]:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.triggers.interval import IntervalTrigger

    lateness: list[float] = []
    instants: list[tuple[float, float]] = []
    anchor = datetime(1970, 1, 1, tzinfo=UTC)
    measuring = False

    async def job(period: float) -> None:
        now = time.time()
        if measuring:
            fire = math.floor(now / period) * period
            lateness.append(now - fire)
            instants.append((fire, now - fire))

    sched = AsyncIOScheduler(timezone="UTC")
    sched.start()
    for i, period in enumerate(intervals(kind, n)):
        sched.add_job(
            job,
            IntervalTrigger(seconds=period, start_date=anchor, timezone=UTC),
            args=[period],
            id=f"j{i}",
            misfire_grace_time=None,
            coalesce=True,
            max_instances=1,
        )
    freeze_startup_heap()  # as `companyd run` does once started
    await asyncio.sleep(6.0)
    measuring = True
    await asyncio.sleep(seconds)
    measuring = False
    gc.unfreeze()
    sched.pause()
    await asyncio.sleep(1.0)  # shutdown() cancels running coroutine jobs: let them end first
    sched.shutdown(wait=False)
    await asyncio.sleep(0)
    return {
        "fires": len(lateness),
        "p50_ms": 1000 * quantile(lateness, 0.5),
        "p99_ms": 1000 * quantile(lateness, 0.99),
        "max_ms": 1000 * max(lateness),
        **per_instant(instants),
    }


async def compressed(
    config: CompanyConfig, days: float, attempts: int, downtime: list[tuple[float, float]]
) -> SimReport:
    clock = ManualClock(start=datetime(2027, 3, 1, tzinfo=UTC).timestamp())
    sink = FlakySink(failure_rate=0.2, attempts=attempts, seed=2027, clock=clock)
    with tempfile.TemporaryDirectory() as d:
        return await simulate(config, days, sink, clock, state_dir=Path(d), downtime=downtime)


def summarize(name: str, rep: SimReport, days: float) -> dict[str, Any]:
    return {
        "scenario": name,
        "due_fire_times": rep.due,
        "due_runs": rep.due_runs,
        "ok": rep.ok,
        "success_rate": rep.success_rate,
        "complete": rep.complete,
        "missing_rows": len(rep.missing),
        "duplicate_rows": len(rep.duplicates),
        "non_success": len(rep.non_success),
        "non_success_without_reason": len(rep.unexplained),
        "reasons": rep.to_dict()["non_success_reasons"],
        "per_routine": {
            s: {"due": v.due, "outcomes": dict(v.outcomes), "success_rate": v.success_rate}
            for s, v in rep.routines.items()
        },
        "wall_seconds": round(rep.wall_seconds, 2),
        "compression": round(days * 86400 / rep.wall_seconds),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer bursts, 7 days")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--only",
        choices=("lateness", "burst", "compressed"),
        help="run one half of the benchmark (burst: only the burst half of lateness)",
    )
    args = parser.parse_args()
    spread_seconds = 30.0 if args.quick else 90.0
    burst_seconds = 10.0 if args.quick else 60.0
    days = 7.0 if args.quick else 30.0
    out: dict[str, Any] = {
        "machine": f"{platform.node()} {platform.machine()} {platform.processor() or ''} "
        f"python {platform.python_version()} sqlite {sqlite3.sqlite_version}",
        "cpus": len(os.sched_getaffinity(0)),
        "load_before": os.getloadavg(),
    }

    out["lateness"] = {}
    for kind, seconds in (("spread", spread_seconds), ("burst", burst_seconds)):
        if args.only == "compressed":
            break
        if args.only == "burst" and kind != "burst":
            continue
        base = await lateness_apscheduler(kind, 1000, seconds)
        ours = await lateness_companyd(kind, 1000, seconds)
        ours["p99_ratio_vs_apscheduler"] = ours["p99_ms"] / max(base["p99_ms"], 1e-9)
        out["lateness"][kind] = {"apscheduler_plain": base, "companyd": ours}

    example = load_config(ROOT / "company.yaml")
    day = 86400.0
    downtime = [
        (2 * day + 13.9 * 3600, 2 * day + 14.2 * 3600),  # across daily-post's 14:00
        (9 * day + 3 * 3600, 9 * day + 9 * 3600),  # six hours in the night
        (20 * day + 8.5 * 3600, 20 * day + 8.6 * 3600),
    ]
    downtime = [w for w in downtime if w[1] < days * day]
    dense = company_with(
        "".join(
            f"  d{i}: {{assignee: ops, description: Work., trigger: {{every: 30m}}, "
            f"catch_up: run_once}}\n"
            for i in range(10)
        )
    )
    out["compressed"] = []
    out["restarts"] = downtime
    for name, cfg, attempts, down in (
        ("example company, 1 attempt/run", example, 1, []),
        ("example company, 5 attempts/run", example, 5, []),
        ("dense (10 × every 30m), 1 attempt/run", dense, 1, []),
        ("dense (10 × every 30m), 5 attempts/run", dense, 5, []),
        ("example company, 5 attempts/run, 3 restarts", example, 5, downtime),
        ("dense (10 × every 30m), 5 attempts/run, 3 restarts", dense, 5, downtime),
    ):
        if args.only in ("lateness", "burst"):
            break
        rep = await compressed(cfg, days, attempts, down)
        out["compressed"].append(summarize(name, rep, days))

    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return
    print(f"machine: {out['machine']} ({out['cpus']} cpus), load average {out['load_before']}")
    for kind, what in (
        ("spread", "1,000 routines every 20–40 s (20 ms apart)"),
        ("burst", "1,000 routines every 5 s, all due at the same instant"),
    ):
        if kind not in out["lateness"]:
            continue
        base = out["lateness"][kind]["apscheduler_plain"]
        ours = out["lateness"][kind]["companyd"]
        print(f"\nlateness, {what}, real clock:")
        print(
            f"  plain APScheduler  p50 {base['p50_ms']:.1f} ms  p99 {base['p99_ms']:.1f} ms  "
            f"max {base['max_ms']:.1f} ms  ({base['fires']} fires)"
        )
        print(
            f"  companyd (submit)  p50 {ours['p50_ms']:.1f} ms  p99 {ours['p99_ms']:.1f} ms  "
            f"max {ours['max_ms']:.1f} ms  ({ours['fires']} fires)  p99 ratio "
            f"{ours['p99_ratio_vs_apscheduler']:.2f}×  (dispatch p50 "
            f"{ours['dispatch_p50_ms']:.1f} / p99 {ours['dispatch_p99_ms']:.1f} ms)"
        )
        for name, r in (("plain APScheduler", base), ("companyd", ours)):
            if "bursts" in r:
                print(
                    f"  {name}: p99 of each burst on its own: median "
                    f"{r['burst_p99_ms_median']:.1f} ms, best {r['burst_p99_ms_best']:.1f}, "
                    f"worst {r['burst_p99_ms_worst']:.1f}; under 100 ms in "
                    f"{r['bursts_under_100ms']} of {r['bursts']} bursts"
                )
    if out["compressed"]:
        print(
            f"\ncompressed time, {days:g} days, 20 % transient call failures "
            f"(restarts, where named: down/up offsets in s {downtime}):"
        )
    for s in out["compressed"]:
        rate = s["success_rate"]
        print(
            f"  {s['scenario']}: {s['ok']}/{s['due_runs']} ok "
            f"({100 * rate:.2f} %), complete={s['complete']} (missing {s['missing_rows']}, "
            f"duplicates {s['duplicate_rows']}, unexplained "
            f"{s['non_success_without_reason']}), {s['wall_seconds']} s wall, "
            f"{s['compression']}× real time"
        )
        for reason, count in sorted(s["reasons"].items()):
            print(f"      {count:5d}  {reason}")
        for slug, r in s["per_routine"].items():
            sr = r["success_rate"]
            print(
                f"      {slug:20s} due {r['due']:6d}  "
                f"{'—' if sr is None else f'{100 * sr:.2f} %':>9s}  {r['outcomes']}"
            )


if __name__ == "__main__":
    asyncio.run(main())
