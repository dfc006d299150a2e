"""Spend benchmarks: reserve+settle throughput, and ledger reads at 1M rows.

    .venv/bin/python bench/bench_spend.py                 # 2,000 calls, 1,000,000 rows
    .venv/bin/python bench/bench_spend.py --calls 500 --rows 100000

Every figure is reported with a baseline measured in the same run on the same disk, and
the ratio between them (the machine is shared and noisy; ratios travel better):

* reserve+settle: SpendBook's full path (in-memory budget check, an ``inflight`` row, one
  FULL-sync transaction inserting the call and updating eight running totals, events) vs a
  bare SQLite ``INSERT`` + ``COMMIT`` with ``synchronous=FULL`` — the floor any durable
  ledger pays per call;
* ledger reads at N rows: what budgets and reports read (the running totals) vs the same
  answer computed by scanning ``calls``;
* SpendBook.open() on the big ledger (loads today's totals and 7 days of runaway history).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import sqlite3
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from companyd.clock import ManualClock
from companyd.config import load_config_text
from companyd.events import EventBus
from companyd.llm._model import Usage
from companyd.spend import SpendBook
from companyd.spend._ledger import Ledger

AGENTS = [f"agent{i}" for i in range(8)]
MODELS = ["claude-sonnet-5-5", "claude-haiku-5-5", "claude-opus-5-5", "claude-fable-5-1"]
ROUTINES = [None, *(f"routine{i}" for i in range(9))]

CONFIG = """
schema: companyd/v1
company: {name: Bench, timezone: UTC, budget: {daily_usd: 1000000, monthly_usd: 10000000}}
agents:
""" + "".join(
    f"  {a}: {{title: {a}, instructions: x{'' if i == 0 else ', reports_to: agent0'}, "
    "budget: {daily_usd: 100000}}\n"
    for i, a in enumerate(AGENTS)
)


def timed(fn, repeat: int = 5) -> float:
    """Median seconds of ``fn()`` over ``repeat`` runs."""
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


# -- reserve + settle --------------------------------------------------------------------


async def book_calls(state: Path, n: int, concurrency: int) -> float:
    cfg = load_config_text(CONFIG, base_dir=state)
    book = SpendBook(cfg, state, bus=EventBus())
    await book.open()
    try:
        rng = random.Random(1)
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                agent = AGENTS[i % len(AGENTS)]
                res = await book.reserve(
                    agent=agent,
                    run_id=f"run-{i}",
                    routine=ROUTINES[i % len(ROUTINES)],
                    model="claude-sonnet-5-5",
                    input_tokens=20_000,
                    max_output_tokens=2_000,
                )
                await book.settle(
                    res,
                    model="claude-sonnet-5-5",
                    usage=Usage(
                        input_tokens=rng.randint(100, 5000),
                        output_tokens=rng.randint(10, 2000),
                        cache_read_tokens=rng.randint(0, 10_000),
                    ),
                    request_id=f"req_{i}",
                )

        t = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.perf_counter() - t
    finally:
        await book.close()


def raw_inserts(path: Path, n: int) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (ts REAL, agent TEXT, cost INTEGER)")
    t = time.perf_counter()
    for i in range(n):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t VALUES (?, ?, ?)", (float(i), "a", i))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - t
    db.close()
    return elapsed


# -- a big ledger ------------------------------------------------------------------------


def build_ledger(path: Path, rows: int, end: datetime) -> None:
    """``rows`` calls over the 365 days before ``end``, with matching running totals."""
    Ledger(path).close()  # schema
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous=OFF")
    rng = random.Random(42)
    start = end - timedelta(days=365)
    span = (end - start).total_seconds()
    totals: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0] * 7)
    batch = []
    db.execute("BEGIN")
    for i in range(rows):
        ts = start.timestamp() + span * i / rows
        d = datetime.fromtimestamp(ts, UTC)
        day, month = d.date().isoformat(), d.strftime("%Y-%m")
        agent, model = rng.choice(AGENTS), rng.choice(MODELS)
        routine = rng.choice(ROUTINES)
        u = (
            rng.randint(0, 5000),
            rng.randint(0, 2000),
            0,
            rng.randint(0, 9000),
            rng.randint(1, 2000),
        )
        cost = rng.randint(10**6, 10**10)
        batch.append((ts, day, month, agent, routine, f"run-{i}", model, *u, cost, f"req_{i}", 1))
        for dim, key in (
            ("company", ""),
            ("agent", agent),
            ("model", model),
            ("routine", routine or ""),
        ):
            for period in (day, month):
                tot = totals[(dim, period, key)]
                tot[0] += 1
                for j in range(5):
                    tot[1 + j] += u[j]
                tot[6] += cost
        if len(batch) == 50_000:
            db.executemany(
                "INSERT INTO calls (ts, day, month, agent, routine, run_id, model, input_tokens, "
                "cache_write_5m_tokens, cache_write_1h_tokens, cache_read_tokens, output_tokens, "
                "cost_pusd, request_id, price_known) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                batch,
            )
            batch.clear()
    if batch:
        db.executemany(
            "INSERT INTO calls (ts, day, month, agent, routine, run_id, model, input_tokens, "
            "cache_write_5m_tokens, cache_write_1h_tokens, cache_read_tokens, output_tokens, "
            "cost_pusd, request_id, price_known) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            batch,
        )
    db.executemany(
        "INSERT INTO totals VALUES (?,?,?,?,?,?,?,?,?,?)",
        [(dim, period, key, *v) for (dim, period, key), v in totals.items()],
    )
    db.execute("COMMIT")
    db.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args()
    machine = f"{platform.machine()} {platform.processor() or ''}".strip()
    versions = f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}"
    print(f"machine: {machine}; {versions}")
    results = []

    with tempfile.TemporaryDirectory(prefix="bench-spend-", dir=".") as tmp:
        root = Path(tmp)
        n = args.calls
        raw = raw_inserts(root / "raw.sqlite", n)
        seq = asyncio.run(book_calls(root / "seq", n, 1))
        par = asyncio.run(book_calls(root / "par", n, 8))
        results.append(
            (
                "reserve+settle, 1 agent at a time",
                f"{n / seq:,.0f} calls/s",
                f"{seq / n * 1e3:.2f} ms/call",
            )
        )
        results.append(
            (
                "reserve+settle, 8 concurrent",
                f"{n / par:,.0f} calls/s",
                f"{par / n * 1e3:.2f} ms/call",
            )
        )
        results.append(
            (
                "baseline: bare INSERT+COMMIT, FULL sync",
                f"{n / raw:,.0f} commits/s",
                f"{raw / n * 1e3:.2f} ms/commit",
            )
        )
        results.append(("ratio reserve+settle / bare commit", f"{seq / raw:.2f}×", ""))

        end = datetime(2026, 11, 20, 12, tzinfo=UTC)
        big = root / "big" / "spend.sqlite"
        big.parent.mkdir()
        t = time.perf_counter()
        build_ledger(big, args.rows, end)
        build = time.perf_counter() - t
        print(f"built a {args.rows:,}-row ledger in {build:.1f} s")
        led = Ledger(big, readonly=True)
        day, month = "2026-11-20", "2026-11"
        days = [(end.date() - timedelta(days=i)).isoformat() for i in range(90)]
        t_budget = timed(lambda: (led.used(day), led.used(month)))
        t_month = timed(lambda: led.totals("agent", led.day_keys_between("2026-11-01", day)))
        t_range = timed(lambda: led.days_between(days[-1], day))
        db = sqlite3.connect(f"file:{big}?mode=ro", uri=True)
        scan_month = timed(
            lambda: db.execute(
                "SELECT agent, SUM(cost_pusd) FROM calls WHERE month=? GROUP BY agent", (month,)
            ).fetchall(),
            repeat=3,
        )
        scan_range = timed(
            lambda: db.execute(
                "SELECT day, SUM(cost_pusd) FROM calls WHERE ts >= ? GROUP BY day",
                ((end - timedelta(days=90)).timestamp(),),
            ).fetchall(),
            repeat=3,
        )
        db.close()
        led.close()
        results.append(
            (
                f"budget read (today + month, all scopes), {args.rows:,} rows",
                f"{t_budget * 1e3:.2f} ms",
                "",
            )
        )
        results.append(
            (
                f"spend by agent this month (totals), {args.rows:,} rows",
                f"{t_month * 1e3:.2f} ms",
                "",
            )
        )
        results.append(
            (
                "baseline: same by scanning calls",
                f"{scan_month * 1e3:.1f} ms",
                f"ratio {scan_month / t_month:.0f}×",
            )
        )
        results.append(
            (f"spend by day, 90 days (totals), {args.rows:,} rows", f"{t_range * 1e3:.2f} ms", "")
        )
        results.append(
            (
                "baseline: same by scanning calls (ts index)",
                f"{scan_range * 1e3:.1f} ms",
                f"ratio {scan_range / t_range:.0f}×",
            )
        )

        async def open_big() -> float:
            cfg = load_config_text(CONFIG, base_dir=big.parent)
            book = SpendBook(
                cfg, big.parent, bus=EventBus(), clock=ManualClock(start=end.timestamp())
            )
            t = time.perf_counter()
            await book.open()
            elapsed = time.perf_counter() - t
            await book.close()
            return elapsed

        t_open = asyncio.run(open_big())
        results.append(
            (
                f"SpendBook.open() on {args.rows:,} rows (7 days of history)",
                f"{t_open * 1e3:.0f} ms",
                "",
            )
        )

    print()
    print("| what | figure | note |")
    print("| --- | --- | --- |")
    for what, fig, note in results:
        print(f"| {what} | {fig} | {note} |")


if __name__ == "__main__":
    main()
