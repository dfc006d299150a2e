"""Runaway detection: an agent spending far faster than it usually does.

Budgets stop spend at a ceiling; this catches a loop *before* the ceiling — the planning
loop that burns $2,000 in 47 minutes on a $5,000 budget. Time is cut into windows of
``spend.runaway_window`` seconds (default 10 minutes). For each agent:

* *recent spend* is what it settled in the trailing window;
* its *usual spend* is the mean spend of the windows in which it spent anything over the
  past seven days, excluding the windows that overlap the current one. Averaging over
  *active* windows (not over the whole week) compares a burst with the agent's normal
  working pace, so a routine that runs once a day is not flagged every time it runs;
* with fewer than three active windows of history the usual spend is taken as one full
  run's worth — the agent's ``limits.max_cost_usd`` (or $0.50 without one) — and it is
  never taken as less than $0.02, so a very cheap agent does not alarm on a longer run.

When recent spend exceeds ``spend.runaway_factor`` × usual spend, one ``spend_runaway``
event is published — at most once per window per agent, whether or not a budget is near.

Cost per settled call: constant, not the number of calls in the window (a runaway loop is
exactly when that number is large). The trailing window keeps a running total
(:class:`_Recent`), and the usual spend is summed once per window and kept until a bucket
it counted changes. The decisions are those of summing everything on every call
(tests/spend/test_spend_runaway.py compares the two on random sequences, the clock stepping
back included; bench/bench_runaway.py measures the gain).
"""

from __future__ import annotations

from collections import deque
from decimal import Decimal
from typing import Any

from companyd.admin import format_usd, usd_places
from companyd.spend._ledger import from_pusd, to_pusd, usd_said

__all__ = ["RunawayDetector"]

#: How far back an agent's usual spend is measured.
HISTORY_SECONDS = 7 * 86400
#: Fewer active windows than this means "no usual pace yet".
MIN_WINDOWS = 3
#: The usual spend per window assumed without history or a per-run limit: one modest run.
DEFAULT_USD = Decimal("0.50")
#: The usual spend per window is never taken as less than this.
FLOOR_USD = Decimal("0.02")


class RunawayDetector:
    """Per-agent spend rates over sliding windows (see the module docstring).

    Args:
        window: seconds per window.
        factor: how many times the usual spend counts as a runaway.
    """

    def __init__(self, window: float, factor: Decimal) -> None:
        self.window = float(window)
        self.factor = factor
        self._recent: dict[str, _Recent] = {}
        self._buckets: dict[str, dict[int, int]] = {}
        self._last_alert: dict[str, float] = {}
        self._pruned: dict[str, int] = {}
        #: per agent: (cutoff, count, total) of its buckets below ``cutoff`` that spent
        #: anything, as check() last summed them; dropped when one of those buckets changes
        self._usual: dict[str, tuple[int, int, int]] = {}

    def reconfigure(self, window: float, factor: Decimal) -> None:
        """New settings; a new window length restarts the history (buckets of the old
        length cannot be re-cut).
        """
        if float(window) != self.window:
            self._recent.clear()
            self._buckets.clear()
            self._last_alert.clear()
            self._pruned.clear()
            self._usual.clear()
        self.window = float(window)
        self.factor = factor

    def add(self, agent: str, ts: float, pusd: int) -> None:
        """Record ``pusd`` picodollars settled by ``agent`` at ``ts`` (also used to load
        history from the ledger on start).
        """
        w = self.window
        recent = self._recent.get(agent)
        if recent is None:
            recent = self._recent[agent] = _Recent()
        recent.append(ts, pusd)
        recent.evict(ts - w)
        buckets = self._buckets.setdefault(agent, {})
        b = int(ts // w)
        buckets[b] = buckets.get(b, 0) + pusd
        summed = self._usual.get(agent)
        if summed is not None and b < summed[0]:  # a late call (history, the clock set back)
            del self._usual[agent]
        # Prune once per new window, not on every call (a scan of up to a week of windows).
        oldest = int((ts - HISTORY_SECONDS) // w)
        if self._pruned.get(agent, oldest - 1) < oldest:
            self._pruned[agent] = oldest
            gone = [k for k in buckets if k < oldest]
            for k in gone:
                del buckets[k]
            if gone:
                self._usual.pop(agent, None)

    def check(self, agent: str, ts: float, per_run_usd: float | None) -> dict[str, Any] | None:
        """The data of a ``spend_runaway`` event if ``agent``'s spend in the window ending at
        ``ts`` is a runaway not yet reported in this window, else None.

        Args:
            agent: the agent slug whose recorded spend is checked.
            ts: the end of the window, in epoch seconds.
            per_run_usd: the agent's per-run cost limit, the usual spend assumed while it
                has no history.
        """
        w = self.window
        recent = self._recent.get(agent)
        if recent is None or not recent.calls:
            return None
        window_spend = recent.spend_after(ts - w)
        # Windows overlapping the current one are not "usual": they contain this burst.
        cutoff = int((ts - w) // w)
        summed = self._usual.get(agent)
        if summed is None or summed[0] != cutoff:
            history = [v for k, v in self._buckets.get(agent, {}).items() if k < cutoff and v > 0]
            summed = self._usual[agent] = (cutoff, len(history), sum(history))
        _, windows, spent = summed
        if windows >= MIN_WINDOWS:
            baseline = Decimal(spent) / windows
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
        rate = from_pusd(window_spend) / minutes
        usual = from_pusd(int(baseline)) / minutes
        per_min = usd_places([rate, usual], minimum=4)  # one precision for both rates
        return {
            "agent": agent,
            "window_seconds": w,
            "window_spend_usd": float(round(from_pusd(window_spend), 6)),
            "rate_usd_per_min": float(round(rate, 6)),
            "usual_usd_per_min": float(round(usual, 6)),
            "factor": float(self.factor),
            "basis": basis,
            "message": (
                f"agent {agent!r} spent {usd_said(from_pusd(window_spend))} in the last "
                f"{w / 60:g} min ({format_usd(rate, per_min)}/min), more than "
                f"{self.factor:g}× its usual {format_usd(usual, per_min)}/min; check what it "
                f"is doing (companyd runs --agent {agent})"
            ),
        }


class _Recent:
    """One agent's settled calls still in the trailing window, oldest first, with their
    running total. Calls normally arrive in time order; ``disorder`` counts the neighbours
    out of order (the wall clock set back, history loaded late) and, while any are in the
    deque, :meth:`spend_after` sums the calls one by one as before.
    """

    __slots__ = ("calls", "disorder", "total")

    def __init__(self) -> None:
        self.calls: deque[tuple[float, int]] = deque()
        self.total = 0
        self.disorder = 0

    def append(self, ts: float, pusd: int) -> None:
        calls = self.calls
        if calls and ts < calls[-1][0]:
            self.disorder += 1
        calls.append((ts, pusd))
        self.total += pusd

    def evict(self, until: float) -> None:
        """Drop the calls from the front while they were settled at or before ``until``."""
        calls = self.calls
        while calls and calls[0][0] <= until:
            t, pusd = calls.popleft()
            self.total -= pusd
            if calls and calls[0][0] < t:
                self.disorder -= 1

    def spend_after(self, since: float) -> int:
        """What the calls still held that were settled after ``since`` cost."""
        if self.disorder:
            return sum(c for t, c in self.calls if t > since)
        total = self.total
        for t, pusd in self.calls:  # in time order: the calls at or before are the front
            if t > since:
                break
            total -= pusd
        return total
