"""Runaway detector: the cost of one settled call (add + check), running figures vs summing.

    .venv/bin/python bench/bench_runaway.py            # bursts of 500, 2,000 and 6,000 calls
    .venv/bin/python bench/bench_runaway.py --quick    # 500 and 2,000

One agent with a week of history (one call in every 10-minute window for seven days, 1,008
windows), then a burst of N calls inside one window (a loop settling a call every 600/N s),
each call added and checked as ``SpendBook.settle`` does. Measured in the same run on the
same sequence: ``companyd.spend._runaway.RunawayDetector`` (running total of the trailing
window, the week's buckets summed once per window) against the definition it replaced
(``SumEveryCall`` of tests/spend/runaway_reference.py, the tests' reference too: the whole
trailing window and every bucket summed on every call).
Both must raise the same alerts; the figure is the median of 5 runs and the ratio.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from companyd.spend._ledger import to_pusd
from companyd.spend._runaway import RunawayDetector

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from spend.runaway_reference import SumEveryCall  # the tests' reference, not a package here

WINDOW = 600.0
START = 1_800_000_000.0


def run(det: Any, burst: int) -> tuple[float, list[int]]:
    """Load a week of history, then time the burst; (seconds, indexes of the alerts)."""
    week = int(7 * 86400 // WINDOW)
    for i in range(week):
        det.add("dev", START - (week - i) * WINDOW, to_pusd(Decimal("0.50")))
    cost = to_pusd(Decimal("0.05"))
    step = WINDOW / burst
    alerts = []
    t0 = time.perf_counter()
    for i in range(burst):
        ts = START + i * step
        det.add("dev", ts, cost)
        if det.check("dev", ts, None) is not None:
            alerts.append(i)
    return time.perf_counter() - t0, alerts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="bursts of 500 and 2,000 only")
    args = ap.parse_args()
    print(f"python {platform.python_version()}, {platform.machine()}")
    print(f"{'burst':>6} {'running figures':>18} {'summing':>14} {'ratio':>7}  alerts")
    for burst in (500, 2_000) if args.quick else (500, 2_000, 6_000):
        ours, theirs = [], []
        for _ in range(5):
            a, alerts_a = run(RunawayDetector(WINDOW, Decimal(5)), burst)
            b, alerts_b = run(SumEveryCall(WINDOW, Decimal(5)), burst)
            assert alerts_a == alerts_b, (alerts_a, alerts_b)
            ours.append(a)
            theirs.append(b)
        mo, mt = statistics.median(ours), statistics.median(theirs)
        print(
            f"{burst:>6} {mo / burst * 1e6:>13.1f} µs {mt / burst * 1e6:>9.1f} µs "
            f"{mt / mo:>6.1f}×  {alerts_a}"
        )


if __name__ == "__main__":
    main()
