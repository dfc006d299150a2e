"""Run-journal reads at 100,000 runs: ``companyd runs show`` and the ``runs`` filters.

    .venv/bin/python bench/bench_runs.py                   # 100,000 runs, 200 samples
    .venv/bin/python bench/bench_runs.py --runs 10000 --samples 50

Issue 17's target: the store stays fast at 100,000 runs, ``runs show`` under 100 ms. The
journal is filled as the agent runtime fills it (a task, a run and five steps per run — a
model call asking for a tool, the tool's start and result, the final model call, a
review — plus one consultation run per ten runs, and a thread of follow-ups), then every
figure is measured beside a baseline taken in the same run, because the machine is shared
and noisy (ratios travel better):

* **transcript, in the store**: ``Journal.show_run`` for random runs on the 100,000-run
  journal (on the journal's thread, as the daemon answers ``run_show``) vs ``list_runs`` on
  an empty journal — the cheapest query the store answers;
* **transcript, end to end**: ``companyd runs show RUN_ID --json`` as a process reading the
  files (interpreter start, imports, config, SQLite open, print) vs ``companyd runs`` on
  an empty state directory — what the founder waits for, and how much of it the size of
  the store adds;
* **the list and its filters** at 100,000 runs (``--agent``, ``--routine``, ``--status``,
  ``--since``, ``runs last``) vs the same on the empty journal;
* **retention**: pruning 10 % of the runs (with their steps).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from companyd.runs import Journal

AGENTS = [f"agent{i}" for i in range(10)]
ROUTINES = [None, *(f"routine{i}" for i in range(20))]
T0 = 1_800_000_000.0

CONFIG = """
schema: companyd/v1
company: {name: Bench, timezone: UTC, budget: {daily_usd: 1000}}
agents:
""" + "".join(
    f"  {a}: {{title: {a}, instructions: x{'' if i == 0 else ', reports_to: agent0'}}}\n"
    for i, a in enumerate(AGENTS)
)


def _steps(run_id: str, started: float, rng: random.Random) -> list[tuple[Any, ...]]:
    usage = {"input_tokens": 1200, "output_tokens": 80, "cache_read_tokens": 3000}
    first = {
        "model": "claude-sonnet-5-5",
        "content": [
            {"type": "text", "text": "Let me look that up. " * 5},
            {"type": "tool_use", "id": f"tu-{run_id}", "name": "search_nodes", "input": {"q": "x"}},
        ],
        "stop_reason": "tool_use",
        "usage": usage,
        "cost": "0.0061",
        "offline": False,
        "request_id": None,
    }
    result = {
        "type": "tool_result",
        "tool_use_id": f"tu-{run_id}",
        "content": "y" * rng.randint(200, 2_000),
    }
    last = {
        **first,
        "content": [{"type": "text", "text": "Done. " * 40}],
        "stop_reason": "end_turn",
    }
    review = {"reviewer": "agent0", "approved": True, "verdict": ""}
    rows: list[tuple[Any, ...]] = [
        (1, "llm", None, first),
        (2, "tool_start", f"tu-{run_id}", {"name": "search_nodes", "input": {"q": "x"}}),
        (3, "tool_result", f"tu-{run_id}", result),
        (4, "llm", None, last),
        (5, "review", None, review),
    ]
    return [(run_id, seq, kind, key, json.dumps(p), started + seq) for seq, kind, key, p in rows]


def fill(journal: Journal, n: int, seed: int = 1) -> list[str]:
    """``n`` finished runs as the runtime journals them; their ids."""
    rng = random.Random(seed)
    ids: list[str] = []

    def insert(db: Any) -> None:
        with db:
            db.execute("BEGIN")
            for i in range(n):
                run_id, task_id = f"run-{i:012x}", f"task-{i:012x}"
                agent, routine = rng.choice(AGENTS), rng.choice(ROUTINES)
                started = T0 + i * 30.0
                asked_by = ids[-1] if i % 10 == 9 and ids else None
                reply_to = ids[-1] if i % 50 == 49 and ids else None
                task = {
                    "id": task_id,
                    "agent": agent,
                    "prompt": "Draft today's post about clinics. " * 4,
                    "source": f"routine:{routine}" if routine else "operator",
                    "created": started,
                    "routine": routine,
                    "consult_chain": [],
                }
                db.execute(
                    "INSERT INTO tasks (id, agent, payload, state, created, updated) "
                    "VALUES (?, ?, ?, 'done', ?, ?)",
                    (task_id, agent, json.dumps(task), started, started + 9),
                )
                db.execute(
                    "INSERT INTO runs (id, task_id, agent, routine, attempt, state, answer, "
                    "started, ended, cost, steps, models, reply_to, asked_by) "
                    "VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, '0.0122', 2, '[\"claude-sonnet-5-5\"]', "
                    "?, ?)",
                    (
                        run_id,
                        task_id,
                        agent,
                        routine,
                        "ok" if rng.random() < 0.95 else "failed",
                        "Done. " * 40,
                        started,
                        started + 9,
                        reply_to,
                        asked_by,
                    ),
                )
                db.executemany(
                    "INSERT INTO steps (run_id, seq, kind, key, payload, ts) VALUES (?,?,?,?,?,?)",
                    _steps(run_id, started, rng),
                )
                ids.append(run_id)

    journal.run_sync(insert)
    return ids


def samples(fn: Callable[[], Any], count: int) -> list[float]:
    out = []
    for _ in range(count):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


def cli(config: Path, state: Path, *argv: str) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of ``companyd ARGV`` as a process."""
    env = {k: v for k, v in os.environ.items() if k not in ("COMPANYD_CONFIG", "STATE_DIRECTORY")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "companyd",
            *argv,
            "--config",
            str(config),
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"companyd {' '.join(argv)} failed: {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--cli-samples", type=int, default=15)
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"python {platform.python_version()}, {platform.platform()}")
    with tempfile.TemporaryDirectory(prefix="bench-runs-") as tmp:
        root = Path(tmp)
        config = root / "company.yaml"
        config.write_text(CONFIG, encoding="utf-8")
        big_state, empty_state = root / "big", root / "empty"
        big_state.mkdir()
        empty_state.mkdir()
        big = Journal(big_state / "runs.sqlite")
        empty = Journal(empty_state / "runs.sqlite")
        # run_sync opens each journal on its thread (migrations included)
        t = time.perf_counter()
        ids = fill(big, args.runs)
        print(
            f"filled {args.runs:,} runs (5 steps each) in {time.perf_counter() - t:.1f} s; "
            f"file {(big_state / 'runs.sqlite').stat().st_size / 1e6:.0f} MB"
        )
        empty.run_sync(lambda db: None)
        rng = random.Random(7)

        show = samples(
            lambda: big.run_sync(lambda db: big.show_run(db, rng.choice(ids))), args.samples
        )
        base = samples(lambda: empty.run_sync(lambda db: empty.list_runs(db)), args.samples)
        shown = big.run_sync(lambda db: big.show_run(db, ids[99]))
        assert shown is not None and len(shown["steps"]) == 4, shown
        print(
            f"transcript in the store at {args.runs:,} runs: p50 {ms(statistics.median(show))}, "
            f"p99 {ms(p(show, 0.99))}, max {ms(max(show))}; baseline list on an empty journal: "
            f"p50 {ms(statistics.median(base))}, p99 {ms(p(base, 0.99))}; ratio p50 "
            f"{statistics.median(show) / statistics.median(base):.2f}x, p99 "
            f"{p(show, 0.99) / p(base, 0.99):.2f}x"
        )

        async def through_the_loop() -> list[float]:
            # as the daemon answers run_show: from the event loop, on the journal's thread
            out = []
            for _ in range(args.samples):
                t = time.perf_counter()
                await big.transcript(rng.choice(ids))
                out.append(time.perf_counter() - t)
            return out

        looped = asyncio.run(through_the_loop())
        print(
            f"transcript from the event loop (Journal.transcript, as run_show): p50 "
            f"{ms(statistics.median(looped))}, p99 {ms(p(looped, 0.99))}"
        )

        queries: dict[str, Callable[[Journal, Any], Any]] = {
            "runs (newest 20)": lambda j, db: j.list_runs(db),
            "--agent": lambda j, db: j.list_runs(db, "agent3"),
            "--routine": lambda j, db: j.list_runs(db, routine="routine7"),
            "--status failed": lambda j, db: j.list_runs(db, status="failed"),
            "--since (last day)": lambda j, db: j.list_runs(db, since=T0 + args.runs * 30 - 86_400),
            "runs last ROUTINE": lambda j, db: j.list_runs(
                db, limit=1, routine="routine7", finished=True
            ),
        }
        for name, q in queries.items():
            on_big = samples(lambda q=q: big.run_sync(lambda db: q(big, db)), 50)
            on_empty = samples(lambda q=q: empty.run_sync(lambda db: q(empty, db)), 50)
            print(
                f"{name:22} at {args.runs:,}: p50 {ms(statistics.median(on_big))} (empty "
                f"{ms(statistics.median(on_empty))}, ratio "
                f"{statistics.median(on_big) / statistics.median(on_empty):.1f}x)"
            )
        big.run_sync(lambda db: db.close())
        empty.run_sync(lambda db: db.close())

        end_to_end, baseline = [], []
        for _ in range(args.cli_samples):  # interleaved: both see the same load
            end_to_end.append(cli(config, big_state, "runs", "show", rng.choice(ids), "--json"))
            baseline.append(cli(config, empty_state, "runs"))
        wall = [w for w, _ in end_to_end], [w for w, _ in baseline]
        cpu = [c for _, c in end_to_end], [c for _, c in baseline]
        print(
            f"`companyd runs show RUN_ID --json` at {args.runs:,} runs, as a process: p50 wall "
            f"{ms(statistics.median(wall[0]))}, CPU {ms(statistics.median(cpu[0]))}; "
            f"`companyd runs` on an empty state: wall {ms(statistics.median(wall[1]))}, CPU "
            f"{ms(statistics.median(cpu[1]))}; ratio wall "
            f"{statistics.median(wall[0]) / statistics.median(wall[1]):.2f}x, CPU "
            f"{statistics.median(cpu[0]) / statistics.median(cpu[1]):.2f}x"
        )

        pruner = Journal(big_state / "runs.sqlite")
        cutoff = T0 + args.runs * 30 * 0.1

        async def prune() -> int:
            await pruner.open()
            try:
                return await pruner.prune(cutoff)
            finally:
                await pruner.close()

        t = time.perf_counter()
        deleted = asyncio.run(prune())
        print(
            f"retention: pruned {deleted:,} runs with their steps in "
            f"{time.perf_counter() - t:.2f} s"
        )


if __name__ == "__main__":
    main()
