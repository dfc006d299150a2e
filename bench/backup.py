#!/usr/bin/env python3
"""Backup of the example company after a simulated month: size and time (issue 20).

The state is made the way the daemon makes it: ``simulate_company`` (the same harness as
``bench/bench_routines_30d.py``) runs the example company.yaml's routines for ``--days``
simulated days through the real agent runtime — scheduler, agents, run journal, spend
ledger, memory owner — with every model call going through the official ``anthropic`` SDK
to the loopback Messages API stand-in (no fault injection here: the state, not the retries,
is what is measured). ``dense`` makes the heartbeat run every 5 minutes
(``precondition: always``), 30× the runs of the example.

Then, on that state directory: ``take_backup`` three times (the median is reported),
``verify_archive`` and ``restore_backup`` into a fresh directory — the functions
``companyd backup``, ``companyd backup verify`` and ``companyd restore`` call.

Usage::

    .venv/bin/python bench/backup.py                      # example, 30 days
    .venv/bin/python bench/backup.py --scenario dense     # the heartbeat always runs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from companyd.clock import ManualClock
from companyd.config import CompanyConfig, load_config_text
from companyd.ops._archive import verify_archive
from companyd.ops._backup import take_backup
from companyd.ops._restore import restore_backup
from companyd.testing.messages_api import MessagesAPIServer
from companyd.testing.sim_runtime import RoutineResponder, simulate_company

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2026, 11, 1, tzinfo=UTC)


def company(scenario: str, base: Path) -> CompanyConfig:
    doc = yaml.safe_load((ROOT / "company.yaml").read_text(encoding="utf-8"))
    if scenario == "dense":
        doc["routines"]["heartbeat"]["precondition"] = "always"
    text = yaml.safe_dump(doc, sort_keys=False)
    (base / "company.yaml").write_text(text, encoding="utf-8")
    return load_config_text(text, file=str(base / "company.yaml"), base_dir=base)


def sizes(state: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(state.iterdir()) if p.is_file()}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-backup-") as tmp:
        base = Path(tmp)
        state = base / "state"
        state.mkdir(mode=0o700)
        config = company(args.scenario, base)
        clock = ManualClock(start=START.timestamp())
        started = time.perf_counter()
        with MessagesAPIServer(responder=RoutineResponder(), seed=7) as server:
            sim = await simulate_company(config, args.days, server, clock, state_dir=state)
        simulated = time.perf_counter() - started
        state_files = sizes(state)
        runs: list[float] = []
        archive = base / "backup.tar.gz"
        result = None
        for _ in range(3):
            result = take_backup(config, state, archive)
            runs.append(result.seconds)
        assert result is not None
        t = time.perf_counter()
        report = verify_archive(archive)
        verify_s = time.perf_counter() - t
        assert report.ok, report.problems
        t = time.perf_counter()
        restored = restore_backup(archive, base / "restored")
        restore_s = time.perf_counter() - t
        return {
            "scenario": args.scenario,
            "days": args.days,
            "agent_runs": sum(sim.runs.values()),
            "model_calls": sim.served,
            "simulation_wall_seconds": round(simulated, 1),
            "state_bytes": sum(state_files.values()),
            "state_files": state_files,
            "archive_bytes": result.size,
            "members": {m.name: m.size for m in result.members},
            "backup_seconds": [round(s, 3) for s in runs],
            "backup_median_seconds": round(statistics.median(runs), 3),
            "verify_seconds": round(verify_s, 3),
            "restore_seconds": round(restore_s, 3),
            "restored": restored.restored,
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--days", type=float, default=30.0)
    p.add_argument("--scenario", choices=("example", "dense"), default="example")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = asyncio.run(main_async(args))
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    kib = 1024
    print(
        f"{out['scenario']}, {out['days']:g} simulated days: {out['agent_runs']} agent runs, "
        f"{out['model_calls']} model calls (simulated in {out['simulation_wall_seconds']} s)"
    )
    print(f"state directory: {out['state_bytes'] / kib:.0f} KiB in {len(out['state_files'])} files")
    for name, size in out["members"].items():
        print(f"  {name:<34} {size / kib:>9.1f} KiB")
    ratio = out["archive_bytes"] / max(1, sum(out["members"].values()))
    print(
        f"archive: {out['archive_bytes'] / kib:.1f} KiB ({ratio:.0%} of its members); "
        f"backup {out['backup_median_seconds']} s median of {out['backup_seconds']}, "
        f"verify {out['verify_seconds']} s, restore {out['restore_seconds']} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
