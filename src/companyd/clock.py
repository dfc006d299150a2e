"""Injectable time.

Every piece of companyd that measures or waits on time takes a :class:`Clock`, so tests run
"five crashes in sixty seconds" or "thirty days of routines" in milliseconds on a
:class:`ManualClock` instead of sleeping.

A clock has two readings and one wait:

* ``monotonic()`` — seconds from an arbitrary origin, never going backwards; used for
  intervals (restart intensity windows, heartbeats, breakers).
* ``time()`` — wall-clock seconds since the Unix epoch; used for timestamps that are stored
  or shown (events, ledger rows, routine fire times).
* ``await sleep(seconds)`` — returns once ``seconds`` have passed *on this clock*.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time as _time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock", "utc_from_ts"]


class Clock(Protocol):
    """What time-dependent code asks of time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the Unix epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait until ``seconds`` have passed on this clock."""
        ...


class SystemClock:
    """The real clock: :func:`time.monotonic`, :func:`time.time`, :func:`asyncio.sleep`."""

    def monotonic(self) -> float:
        return _time.monotonic()

    def time(self) -> float:
        return _time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told to.

    ``advance(dt)`` moves both readings forward by ``dt`` and wakes every sleeper whose
    deadline has been reached, in deadline order. Sleepers must be awaited from a running
    event loop; ``advance`` itself is synchronous, so after calling it a test usually yields
    once (``await asyncio.sleep(0)``) to let woken tasks run.

    Args:
        start: initial wall-clock reading (epoch seconds); the monotonic reading starts at 0.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._mono = 0.0
        self._wall = float(start)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._wall

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (>= 0) and wake due sleepers."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards: advance({seconds!r})")
        self._mono += seconds
        self._wall += seconds
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many sleeps are pending (cancelled ones included until their deadline)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def next_deadline(self) -> float | None:
        """The monotonic reading at which the earliest pending sleep ends, or None.

        Lets a driver advance from one wake-up to the next instead of in fixed steps.
        """
        return min((d for d, _, f in self._sleepers if not f.done()), default=None)


def utc_from_ts(ts: float) -> datetime:
    """An aware UTC datetime for an epoch timestamp."""
    return datetime.fromtimestamp(ts, tz=UTC)
