"""How long the run journal keeps transcripts: ``retention.runs_days`` (default 90).

:class:`RunRetention` is a daemon helper: at start and then every :data:`PRUNE_EVERY`
seconds of the injected clock it deletes the runs (with their steps) that ended more than
``runs_days`` days ago, through :meth:`companyd.runs._journal.Journal.prune`, and — with the
same cutoff, in the same pass — what other stores keep about runs (``also``: the pager's
Telegram thread links, message → run; their owners do the deleting). The number of days is
read at each pass, so a reload that changes it takes effect at the next pass. A pass that
fails (a full state disk) is logged and retried at the next one: keeping old transcripts a
day longer harms nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from companyd.clock import Clock
from companyd.runs._journal import Journal
from companyd.supervision import ChildContext

__all__ = ["DAY", "PRUNE_EVERY", "RunRetention"]

log = logging.getLogger(__name__)

DAY = 86_400.0
#: Seconds between two prunes.
PRUNE_EVERY = 6 * 3_600.0


class RunRetention:
    """Prunes old runs from the journal.

    Args:
        journal: the run journal.
        clock: time source (what "days ago" means, and the wait between passes).
        days: the current ``retention.runs_days``.
        also: more records about runs kept as long as the runs, by what they are (for the
            log): each deletes those older than the cutoff it is given (epoch seconds) and
            returns how many it deleted.
    """

    def __init__(
        self,
        journal: Journal,
        clock: Clock,
        days: Callable[[], int],
        also: Mapping[str, Callable[[float], Awaitable[int]]] | None = None,
    ) -> None:
        self.journal = journal
        self.clock = clock
        self.days = days
        self.also = dict(also or {})
        #: runs deleted since the helper started
        self.pruned = 0
        #: passes completed (each store tried, failed or not)
        self.passes = 0

    async def prune_once(self) -> int:
        """One pass; the number of runs deleted. A store of ``also`` that fails is logged
        and tried again at the next pass; the runs are pruned first, whatever it does.
        """
        days = self.days()
        before = self.clock.time() - days * DAY
        try:
            n = await self.journal.prune(before)
            self.pruned += n
            if n:
                log.info("run journal: deleted %d run(s) older than %d days (retention)", n, days)
            for what, prune in self.also.items():
                try:
                    m = await prune(before)
                except Exception as exc:  # the next pass tries again
                    log.warning("retention: pruning the %s failed: %s", what, exc)
                    continue
                if m:
                    log.info("retention: deleted %d %s older than %d days", m, what, days)
        finally:
            self.passes += 1
        return n

    async def run(self, ctx: ChildContext) -> None:
        """Prune now and every :data:`PRUNE_EVERY` seconds, until cancelled."""
        while True:
            try:
                await self.prune_once()
            except Exception as exc:  # the next pass tries again
                log.warning("run journal: retention pass failed: %s", exc)
            await self.clock.sleep(PRUNE_EVERY)
