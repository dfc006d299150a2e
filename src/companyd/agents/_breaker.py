"""The per-run circuit breaker: the defences against runs that go wrong without raising.

An agent reasoning in circles, a runaway chain of calls, a run that never ends — none of
these is an exception. The breaker watches one run and trips, with a reason naming the
limit and the value, when:

* its settled cost reaches ``max_cost_usd``;
* its tokens (all kinds) reach ``max_tokens``;
* it has run ``max_seconds`` on the clock;
* it has made ``max_steps`` model calls;
* the same tool was called with the same input ``loop_threshold`` times (loop detection).

Limits come from company.yaml (``limits`` per agent or ``defaults.limits``). A tripped run
ends with status ``circuit_breaker`` and a ``circuit_breaker`` event; the agent itself stays
healthy.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from companyd.admin import RUN_COST_PLACES, format_usd, usd_places
from companyd.config import LimitsSpec
from companyd.errors import CompanydError

__all__ = ["Breaker", "BreakerTripped"]


class BreakerTripped(CompanydError):
    """A run hit one of its limits. ``limit`` names it (``max_steps``, ``loop``, …)."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


class Breaker:
    """Counters for one run, checked before each step.

    Args:
        limits: the agent's limits.
        started: monotonic time the run started (a resumed run keeps its original start
            only within one process; across restarts the clock origin differs, so a resumed
            run's time budget restarts — documented in docs/agents.md).
    """

    def __init__(self, limits: LimitsSpec, started: float) -> None:
        self.limits = limits
        self.started = started
        self.steps = 0
        self.tokens = 0
        self.cost = Decimal(0)
        self._calls: Counter[str] = Counter()

    def add_step(self, tokens: int, cost: Decimal) -> None:
        """Count one completed model call."""
        self.steps += 1
        self.tokens += tokens
        self.cost += cost

    def add_cost(self, cost: Decimal) -> None:
        """Count money spent without a completed model call (an unanswered attempt)."""
        self.cost += cost

    def check(self, now: float) -> None:
        """Raise :class:`BreakerTripped` if any limit is reached."""
        lim = self.limits
        if lim.max_steps is not None and self.steps >= lim.max_steps:
            raise BreakerTripped(
                "max_steps", f"max_steps {lim.max_steps} reached ({self.steps} model calls)"
            )
        if lim.max_cost_usd is not None and self.cost >= Decimal(str(lim.max_cost_usd)):
            limit, spent = lim.max_cost_usd, self.cost
            raise BreakerTripped(
                "max_cost_usd",
                f"max_cost_usd {format_usd(limit, usd_places([limit]))} reached (spent "
                f"{format_usd(spent, usd_places([spent], minimum=RUN_COST_PLACES))})",
            )
        if lim.max_tokens is not None and self.tokens >= lim.max_tokens:
            raise BreakerTripped(
                "max_tokens", f"max_tokens {lim.max_tokens} reached ({self.tokens} tokens)"
            )
        elapsed = now - self.started
        if lim.max_seconds is not None and elapsed >= lim.max_seconds:
            raise BreakerTripped(
                "max_seconds",
                f"max_seconds {lim.max_seconds:g} reached (ran {elapsed:.1f} s)",
            )

    def note_tool_call(self, name: str, arguments: Mapping[str, Any]) -> None:
        """Count a tool call; raise :class:`BreakerTripped` on the ``loop_threshold``-th
        identical call (same tool, same input).
        """
        key = name + ":" + json.dumps(arguments, sort_keys=True, default=str)
        self._calls[key] += 1
        n = self._calls[key]
        if n >= self.limits.loop_threshold:
            raise BreakerTripped(
                "loop",
                f"loop detected: tool {name!r} called {n} times with the same input",
            )
