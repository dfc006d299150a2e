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
"""

from __future__ import annotations

from collections import deque
from decimal import Decimal
from typing import Any

from companyd.spend._ledger import from_pusd, to_pusd

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
        self._recent: dict[str, deque[tuple[float, int]]] = {}
        self._buckets: dict[str, dict[int, int]] = {}
        self._last_alert: dict[str, float] = {}
        self._pruned: dict[str, int] = {}

    def reconfigure(self, window: float, factor: Decimal) -> None:
        """New settings; a new window length restarts the history (buckets of the old
        length cannot be re-cut).
        """
        if float(window) != self.window:
            self._recent.clear()
            self._buckets.clear()
            self._last_alert.clear()
            self._pruned.clear()
        self.window = float(window)
        self.factor = factor

    def add(self, agent: str, ts: float, pusd: int) -> None:
        """Record ``pusd`` picodollars settled by ``agent`` at ``ts`` (also used to load
        history from the ledger on start).
        """
        w = self.window
        recent = self._recent.setdefault(agent, deque())
        recent.append((ts, pusd))
        while recent and recent[0][0] <= ts - w:
            recent.popleft()
        buckets = self._buckets.setdefault(agent, {})
        b = int(ts // w)
        buckets[b] = buckets.get(b, 0) + pusd
        # Prune once per new window, not on every call (a scan of up to a week of windows).
        oldest = int((ts - HISTORY_SECONDS) // w)
        if self._pruned.get(agent, oldest - 1) < oldest:
            self._pruned[agent] = oldest
            for k in [k for k in buckets if k < oldest]:
                del buckets[k]

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
        if not recent:
            return None
        window_spend = sum(c for t, c in recent if t > ts - w)
        # Windows overlapping the current one are not "usual": they contain this burst.
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
        rate = from_pusd(window_spend) / minutes
        usual = from_pusd(int(baseline)) / minutes
        return {
            "agent": agent,
            "window_seconds": w,
            "window_spend_usd": float(round(from_pusd(window_spend), 6)),
            "rate_usd_per_min": float(round(rate, 6)),
            "usual_usd_per_min": float(round(usual, 6)),
            "factor": float(self.factor),
            "basis": basis,
            "message": (
                f"agent {agent!r} spent ${from_pusd(window_spend):.2f} in the last "
                f"{w / 60:g} min (${rate:.4f}/min), more than {self.factor:g}× its usual "
                f"${usual:.4f}/min; check what it is doing (companyd runs --agent {agent})"
            ),
        }
