"""Runaway detector: the cost of one settled call (add + check), running figures vs summing.

    .venv/bin/python bench/bench_runaway.py            # bursts of 500, 2,000 and 6,000 calls
    .venv/bin/python bench/bench_runaway.py --quick    # 500 and 2,000

One agent with a week of history (one call in every 10-minute window for seven days, 1,008
windows), then a burst of N calls inside one window (a loop settling a call every 600/N s),
each call added and checked as ``SpendBook.settle`` does. Measured in the same run on the
same sequence: ``companyd.spend._runaway.RunawayDetector`` (running total of the trailing
window, the week's buckets summed once per window) against the definition it replaced
(``SumEveryCall`` below: the whole trailing window and every bucket summed on every call).
Both must raise the same alerts; the figure is the median of 5 runs and the ratio.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections import deque
from decimal import Decimal
from typing import Any

from companyd.spend._ledger import to_pusd
from companyd.spend._runaway import (
    DEFAULT_USD,
    FLOOR_USD,
    HISTORY_SECONDS,
    MIN_WINDOWS,
    RunawayDetector,
)

WINDOW = 600.0
START = 1_800_000_000.0


class SumEveryCall:
    """The detector before running figures (its decision part; the message is not timed)."""

    def __init__(self, window: float, factor: Decimal) -> None:
        self.window = window
        self.factor = factor
        self._recent: dict[str, deque[tuple[float, int]]] = {}
        self._buckets: dict[str, dict[int, int]] = {}
        self._last_alert: dict[str, float] = {}
        self._pruned: dict[str, int] = {}

    def add(self, agent: str, ts: float, pusd: int) -> None:
        w = self.window
        recent = self._recent.setdefault(agent, deque())
        recent.append((ts, pusd))
        while recent and recent[0][0] <= ts - w:
            recent.popleft()
        buckets = self._buckets.setdefault(agent, {})
        b = int(ts // w)
        buckets[b] = buckets.get(b, 0) + pusd
        oldest = int((ts - HISTORY_SECONDS) // w)
        if self._pruned.get(agent, oldest - 1) < oldest:
            self._pruned[agent] = oldest
            for k in [k for k in buckets if k < oldest]:
                del buckets[k]

    def check(self, agent: str, ts: float, per_run_usd: float | None) -> dict[str, Any] | None:
        w = self.window
        recent = self._recent.get(agent)
        if not recent:
            return None
        window_spend = sum(c for t, c in recent if t > ts - w)
        cutoff = int((ts - w) // w)
        history = [v for k, v in self._buckets.get(agent, {}).items() if k < cutoff and v > 0]
        if len(history) >= MIN_WINDOWS:
            baseline = Decimal(sum(history)) / len(history)
        else:
            default = Decimal(str(per_run_usd)) if per_run_usd else DEFAULT_USD
            baseline = Decimal(to_pusd(default))
        baseline = max(baseline, Decimal(to_pusd(FLOOR_USD)))
        if Decimal(window_spend) <= self.factor * baseline:
            return None
        last = self._last_alert.get(agent)
        if last is not None and ts - last < w:
            return None
        self._last_alert[agent] = ts
        return {"agent": agent}


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
