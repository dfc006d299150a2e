"""Quota walls: models the API's rate limit holds back for longer than is worth waiting.

A 429 whose ``retry-after`` (or, without it, the later ``anthropic-ratelimit-*-reset``)
lies further ahead than ``anthropic.quota_pause_after`` (default 60 s) is a *wall*: calling
that model again before then only meets the same 429 (Paperclip users saw 574 retries into
one). :class:`QuotaWalls` remembers, per model, until when it is walled. Rate limits belong
to the organisation (one API key for the company), so a wall met by one agent holds for
every agent on that model: the runtime skips a walled model without calling it, and an
agent whose every model is walled is paused until the earliest of them lets it call again
(:meth:`companyd.agents._pauses.Pauses.pause_until`; docs/agents.md, "Quota walls").

In memory only: after a restart the paused agents stay paused (their pause is journaled
with its end), and a model's wall is learnt again by the first call that meets it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["WALL_REASON", "QuotaWalls"]

#: How the reason of a quota wall's pause (and of the run it ended) begins, then ``HH:MM``:
#: status shows such a pause as "paused until HH:MM (rate limit)".
WALL_REASON = "rate limit until "


class QuotaWalls:
    """Model → until when (epoch seconds) the API holds it back.

    Args:
        threshold: ``anthropic.quota_pause_after``: a wait at most this long is not a wall
            (retried or fallen back from as before).
    """

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._until: dict[str, float] = {}

    def is_wall(self, retry_after: float | None) -> bool:
        """Whether a 429 asking to wait ``retry_after`` seconds is a wall."""
        return retry_after is not None and retry_after > self.threshold

    def note(self, model: str, until: float) -> None:
        """``model`` answers again at ``until`` (a later wall replaces an earlier one)."""
        self._until[model] = max(until, self._until.get(model, 0.0))

    def until(self, model: str, now: float) -> float | None:
        """When ``model``'s wall ends, or None when it is not walled at ``now``."""
        end = self._until.get(model)
        if end is None:
            return None
        if end <= now:
            del self._until[model]
            return None
        return end

    def chain_until(self, chain: Iterable[str], now: float) -> float | None:
        """When the first model of ``chain`` may be called again, if every one is walled at
        ``now``; None when one of them may be called now.
        """
        ends = [self.until(m, now) for m in chain]
        if not ends or any(e is None for e in ends):
            return None
        return min(e for e in ends if e is not None)
