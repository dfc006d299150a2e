"""Issue 7's acceptance benchmark: the example company's routines for 30 simulated days
through the real agent runtime, with 20 % of model calls failing transiently.

Each scenario runs ``companyd.testing.sim_runtime.simulate_company``: the real scheduler
(clocked APScheduler, routines.sqlite) hands every fire to the in-process daemon's agents
(Staff, the tool-use loop, run journal, breakers, model fallback, the memory and spend
services), whose model calls go through ClaudeBackend and the official ``anthropic`` SDK over
loopback HTTP to the Messages API stand-in, which answers like a model doing the work
(``RoutineResponder``: record the task in memory, then answer; approve reviews) and fails
20 % of the calls at random with HTTP 529 or 500 (seeded). Time is compressed on one
ManualClock (the scheduler jumps from wakeup to wakeup; a run in flight holds time still
except while ClaudeBackend sleeps out a retry backoff, which takes simulated time).

Scenarios (each from Monday 1 March 2027, 00:00 UTC):

* ``baseline`` — company.yaml with ``anthropic.max_retries: 0`` and no fallback models: what
  the injected failures do to a runtime with no defence (the baseline the others compare to);
* ``example`` — company.yaml as it is (ClaudeBackend retries twice per model, then the next
  model of the chain): the acceptance figure;
* ``restarts`` — the same with three daemon restarts (down across daily-post's 14:00 on day
  3; six hours in the night of day 10; six minutes on day 21): misses are recorded, with why;
* ``dense`` — a benchmark copy of company.yaml whose ``heartbeat`` runs every 5 minutes
  whatever memory says (``precondition: always``): ~8,700 due runs, enough to resolve 99.9 %.

For every scenario: per-routine due fire times, due runs, outcomes and success rate; every
non-success with its reason; whether every due fire time has exactly one history row;
whether the calls the stand-in served equal the steps the run journal completed and the
calls the spend ledger settled; spend; wall time.

Run: ``.venv/bin/python bench/bench_routines_30d.py [--days N] [--only NAME ...] [--json]
[--json-out FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from companyd.clock import ManualClock
from companyd.config import CompanyConfig, load_config_text
from companyd.testing.messages_api import MessagesAPIServer
from companyd.testing.sim_runtime import RoutineResponder, RuntimeSimReport, simulate_company

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2027, 3, 1, tzinfo=UTC)  # a Monday and the 1st: every routine is due
FAULT_RATE = 0.2
SEED = 2027
DAY = 86400.0
RESTARTS = (
    (2 * DAY + 13.9 * 3600, 2 * DAY + 14.2 * 3600),  # across daily-post's 14:00
    (9 * DAY + 3 * 3600, 9 * DAY + 9 * 3600),  # six hours in the night
    (20 * DAY + 8.5 * 3600, 20 * DAY + 8.6 * 3600),
)
SCENARIOS = ("baseline", "example", "restarts", "dense")


def company(name: str) -> CompanyConfig:
    doc = yaml.safe_load((ROOT / "company.yaml").read_text(encoding="utf-8"))
    if name == "baseline":
        doc.setdefault("anthropic", {})["max_retries"] = 0
        doc["defaults"]["model"]["fallbacks"] = []
    if name == "dense":
        doc["routines"]["heartbeat"]["precondition"] = "always"
    text = yaml.safe_dump(doc, sort_keys=False)
    return load_config_text(text, file=f"company.yaml ({name})", base_dir=ROOT)


async def run(name: str, days: float) -> tuple[RuntimeSimReport, float]:
    clock = ManualClock(start=START.timestamp())
    downtime = tuple(w for w in RESTARTS if w[1] < days * DAY) if name == "restarts" else ()
    started = time.perf_counter()
    with (
        MessagesAPIServer(
            responder=RoutineResponder(),
            fault_rate=FAULT_RATE,
            fault_statuses=(529, 500),
            seed=SEED,
        ) as server,
        tempfile.TemporaryDirectory(prefix="routines30d-") as state,
    ):
        report = await simulate_company(
            company(name), days, server, clock, state_dir=Path(state), downtime=downtime
        )
    return report, time.perf_counter() - started


def summary(name: str, rep: RuntimeSimReport, wall: float, days: float) -> dict[str, Any]:
    sim = rep.sim
    out = rep.to_dict()
    return {
        "scenario": name,
        "days": days,
        "due_fire_times": sim.due,
        "due_runs": sim.due_runs,
        "ok": sim.ok,
        "success_rate": sim.success_rate,
        "complete": sim.complete,
        "missing_rows": len(sim.missing),
        "duplicate_rows": len(sim.duplicates),
        "non_success_without_reason": len(sim.unexplained),
        "reasons": out["non_success_reasons"],
        "non_success": [
            {
                "routine": r.routine,
                "scheduled": datetime.fromtimestamp(r.scheduled, UTC).isoformat(),
                "kind": r.kind,
                "outcome": r.outcome,
                "fires": r.fires,
                "reason": r.reason,
            }
            for r in sim.non_success
        ],
        "per_routine": out["routines"],
        "model_calls": out["model_calls"],
        "agent_runs": out["agent_runs"],
        "stalls": rep.stalls,
        "spent_usd": out["spent_usd"],
        "events": out["events"],
        "scheduler_wall_seconds": round(sim.wall_seconds, 1),
        "wall_seconds": round(wall, 1),
        "compression": round(days * DAY / wall),
    }


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.2f} %"


def show(s: dict[str, Any]) -> None:
    mc = s["model_calls"]
    print(
        f"\n== {s['scenario']}: {s['ok']}/{s['due_runs']} due runs ok ({pct(s['success_rate'])}); "
        f"{s['due_fire_times']} due fire times; complete={s['complete']} (missing "
        f"{s['missing_rows']}, duplicates {s['duplicate_rows']}, without reason "
        f"{s['non_success_without_reason']}); {s['wall_seconds']} s wall, "
        f"{s['compression']}× real time"
    )
    for slug, r in s["per_routine"].items():
        due_runs = r["recorded"] - r["outcomes"].get("idle", 0)
        print(
            f"   {slug:20s} due {r['due']:5d}  runs {due_runs:5d}  {pct(r['success_rate']):>9s}"
            f"  ${r['cost_usd']:.4f}  {r['outcomes']}"
        )
    print(
        f"   model calls: {mc['requests']} requests, {mc['injected_faults']} injected faults, "
        f"{mc['served']} served = {mc['journal_llm_steps']} journal steps = "
        f"{mc['ledger_calls']} ledger calls ({'match' if mc['calls_match'] else 'MISMATCH'}); "
        f"by model {mc['by_model']}; {mc['fallbacks']} fallbacks; "
        f"{mc['backoff_seconds']} s of backoff (simulated)"
    )
    print(
        f"   agent runs {s['agent_runs']}; spent ${s['spent_usd']:.4f}; stalls {s['stalls']}; "
        f"events {s['events']}"
    )
    for reason, n in sorted(s["reasons"].items(), key=lambda kv: -kv[1]):
        print(f"   {n:5d} × {reason}")
    shown = s["non_success"][:12]
    for r in shown:
        print(f"      {r['scheduled']} {r['routine']} {r['outcome']}: {r['reason']}")
    if len(s["non_success"]) > len(shown):
        print(f"      … {len(s['non_success']) - len(shown)} more (--json lists all)")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--json-out", type=Path, help="also write the JSON to this file")
    args = parser.parse_args()
    out: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": f"{platform.node()} {platform.machine()} python "
        f"{platform.python_version()} sqlite {sqlite3.sqlite_version}",
        "cpus": len(os.sched_getaffinity(0)),
        "load_before": os.getloadavg(),
        "fault_rate": FAULT_RATE,
        "seed": SEED,
        "scenarios": [],
    }
    for name in SCENARIOS:
        if name not in args.only:
            continue
        rep, wall = await run(name, args.days)
        s = summary(name, rep, wall, args.days)
        out["scenarios"].append(s)
        if not args.json:
            show(s)
    out["load_after"] = os.getloadavg()
    by = {s["scenario"]: s for s in out["scenarios"]}
    if "baseline" in by and "example" in by:
        fb = 1 - (by["baseline"]["success_rate"] or 0)
        fe = 1 - (by["example"]["success_rate"] or 0)
        out["failure_rate_ratio_example_vs_baseline"] = fe / fb if fb else None
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(f"\nmachine: {out['machine']} ({out['cpus']} cpus), load {out['load_before']}")
        if "failure_rate_ratio_example_vs_baseline" in out:
            print(
                "failure rate, example vs baseline (no retries, no fallback): "
                f"{out['failure_rate_ratio_example_vs_baseline']:.3f}"
            )
    bad = [
        s["scenario"]
        for s in out["scenarios"]
        if not s["complete"] or not s["model_calls"]["calls_match"]
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
