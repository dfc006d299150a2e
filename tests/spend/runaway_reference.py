"""The runaway detector as it was defined before src/companyd/spend/_runaway.py kept running
figures: every check sums the whole trailing window and the week's buckets. The reference of
tests/spend/test_spend_runaway.py (same decisions, same figures) and of bench/bench_runaway.py
(the cost it replaced, measured in the same run).
"""

from __future__ import annotations

from collections import deque
from decimal import Decimal
from typing import Any

from companyd.spend._ledger import from_pusd, to_pusd
from companyd.spend._runaway import DEFAULT_USD, FLOOR_USD, HISTORY_SECONDS, MIN_WINDOWS

__all__ = ["SumEveryCall"]


class SumEveryCall:
    """The detector as it was defined: every check sums the deque and the buckets."""

    def __init__(self, window: float, factor: Decimal) -> None:
        self.window = float(window)
        self.factor = factor
        self._recent: dict[str, deque[tuple[float, int]]] = {}
        self._buckets: dict[str, dict[int, int]] = {}
        self._last_alert: dict[str, float] = {}
        self._pruned: dict[str, int] = {}

    def reconfigure(self, window: float, factor: Decimal) -> None:
        if float(window) != self.window:
            self._recent.clear()
            self._buckets.clear()
            self._last_alert.clear()
            self._pruned.clear()
        self.window = float(window)
        self.factor = factor

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
            basis = "history"
        else:
            default = Decimal(str(per_run_usd)) if per_run_usd else DEFAULT_USD
            baseline = Decimal(to_pusd(default))
            basis = "default"
        baseline = max(baseline, Decimal(to_pusd(FLOOR_USD)))
        if Decimal(window_spend) <= self.factor * baseline:
            return None
        last = self._last_alert.get(agent)
        if last is not None and ts - last < w:
            return None
        self._last_alert[agent] = ts
        minutes = Decimal(str(w)) / 60
        return {
            "agent": agent,
            "window_spend_usd": float(round(from_pusd(window_spend), 6)),
            "rate_usd_per_min": float(round(from_pusd(window_spend) / minutes, 6)),
            "usual_usd_per_min": float(round(from_pusd(int(baseline)) / minutes, 6)),
            "basis": basis,
        }
