#!/usr/bin/env python3
"""Crash benchmark: SIGKILL a writer at random moments, many times, on one graph file.

Each trial starts tests/memory/_crash_writer.py (journaled writes, a compaction every 7),
kills it with SIGKILL after a random delay, then checks, before anything repairs it:

* the MCP-format file loads and is clean (it is only ever replaced whole);

and after opening it the way a restarted owner does (load + repair):

* every write the writer acknowledged (printed after the call returned) is there.

It also counts where the kills landed: inside a compaction (a temporary file or a next
journal was left behind) and mid-journal-record (a torn journal tail).

    .venv/bin/python bench/bench_memory_crash.py --trials 200
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companyd.memory._codec import parse_graph  # noqa: E402
from companyd.memory._store import GraphStore  # noqa: E402

WRITER = ROOT / "tests" / "memory" / "_crash_writer.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--max-delay", type=float, default=0.15, help="seconds after ready")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    directory = Path(tempfile.mkdtemp(prefix="companyd-crash-"))
    path = directory / "memory.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    acked: set[str] = set()
    acked_obs: dict[str, set[str]] = {}
    failures = 0
    in_compaction = torn = 0
    started = time.perf_counter()
    for trial in range(args.trials):
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(path), str(trial)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert proc.stdout is not None
        if proc.stdout.readline() != b"ready\n":
            print(f"trial {trial}: writer did not start", file=sys.stderr)
            return 2
        time.sleep(rng.uniform(0, args.max_delay))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for line in proc.stdout.read().decode().splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "E":
                acked.add(rest)
            elif kind == "O":
                name, _, obs = rest.partition(" ")
                acked_obs.setdefault(name, set()).add(obs)
        proc.stdout.close()
        names = os.listdir(directory)
        if any(n.endswith(".tmp") or n.endswith(".journal.next") for n in names):
            in_compaction += 1
        if path.exists():
            _, report = parse_graph(path.read_bytes())
            if report.needs_repair:
                failures += 1
                print(f"trial {trial}: MCP file needs repair: {report.summary()}")
        with GraphStore(path) as store:
            report = store.open()
            torn += report.journal_torn
            graph = store.call("read_graph", {})
        have = {e["name"]: set(e["observations"]) for e in graph["entities"]}
        missing = acked - have.keys()
        lost_obs = sum(len(obs - have.get(n, set())) for n, obs in acked_obs.items())
        if missing or lost_obs:
            failures += 1
            print(f"trial {trial}: LOST {len(missing)} entities, {lost_obs} observations")
    elapsed = time.perf_counter() - started
    total_obs = sum(len(v) for v in acked_obs.values())
    print(
        f"{args.trials} trials in {elapsed:.0f} s: {len(acked)} acknowledged entities and "
        f"{total_obs} observations; {failures} trials with a loss or an unclean MCP file; "
        f"kills inside a compaction: {in_compaction}; torn journal records: {torn}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
