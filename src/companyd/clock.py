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

Deadlines on a clock: :func:`within` awaits something for at most ``seconds`` of that clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time as _time
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Protocol, TypeVar
from zoneinfo import ZoneInfo

from companyd._aio import race

__all__ = [
    "Clock",
    "ManualClock",
    "ScaledClock",
    "SystemClock",
    "clock_time",
    "utc_from_ts",
    "within",
]

T = TypeVar("T")


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
        """:func:`time.monotonic`: seconds from an arbitrary origin, never going backwards."""
        return _time.monotonic()

    def time(self) -> float:
        """:func:`time.time`: wall-clock seconds since the Unix epoch."""
        return _time.time()

    async def sleep(self, seconds: float) -> None:
        """:func:`asyncio.sleep` for ``seconds`` (a negative value is 0: returns at the next loop
        turn).
        """
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
        """The monotonic reading: 0 at construction, moved only by :meth:`advance`."""
        return self._mono

    def time(self) -> float:
        """The wall-clock reading: ``start`` at construction, moved only by :meth:`advance`."""
        return self._wall

    async def sleep(self, seconds: float) -> None:
        """Return once :meth:`advance` has moved the clock ``seconds`` forward from now; ``seconds
        <= 0`` yields once to the loop and returns. Must be awaited on a running loop.
        """
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


async def within(clock: Clock, seconds: float, aw: Awaitable[T]) -> T:
    """``await aw``, for at most ``seconds`` on ``clock`` (``asyncio.timeout`` on any clock).

    A coroutine is cancelled (and awaited) when the time runs out; a future or task passed in
    is the caller's and keeps running. ``seconds`` of ``inf`` waits for ever.

    Raises:
        TimeoutError: the time ran out first.
    """
    if seconds == float("inf"):
        return await aw
    won = await race(aw, clock.sleep(seconds))
    if won.index == 1:
        raise TimeoutError(f"not done within {seconds:g} s")
    result: T = won.result()
    return result


def utc_from_ts(ts: float) -> datetime:
    """An aware UTC datetime for an epoch timestamp."""
    return datetime.fromtimestamp(ts, tz=UTC)


class ScaledClock:
    """Real time running ``scale`` times faster — for compressed-time benchmarks (the chaos
    week, the 30-day routine run) against a real daemon process.

    Wall time is ``sim_anchor + (time.time() - real_anchor) * scale``, so every process
    started with the same anchors (a daemon restarted after ``kill -9``) shares one simulated
    timeline. ``sleep(s)`` sleeps ``s / scale`` real seconds.

    Args:
        scale: how many simulated seconds pass per real second (> 0).
        real_anchor: a real epoch time.
        sim_anchor: the simulated epoch time at ``real_anchor``.
    """

    def __init__(self, scale: float, real_anchor: float, sim_anchor: float) -> None:
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale!r}")
        self.scale = float(scale)
        self.real_anchor = float(real_anchor)
        self.sim_anchor = float(sim_anchor)
        self._mono0 = _time.monotonic()

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ScaledClock | None:
        """``COMPANYD_TIME_SCALE=N`` and ``COMPANYD_TIME_ANCHOR=REAL:SIM`` (epoch seconds), or
        None when the scale is not set.

        Raises:
            ValueError: naming the variable and the expected form.
        """
        import os

        env = os.environ if environ is None else environ
        raw = env.get("COMPANYD_TIME_SCALE")
        if not raw:
            return None
        try:
            scale = float(raw)
        except ValueError:
            raise ValueError(f"COMPANYD_TIME_SCALE must be a number, got {raw!r}") from None
        anchor = env.get("COMPANYD_TIME_ANCHOR", "")
        if anchor:
            real_s, _, sim_s = anchor.partition(":")
            try:
                return cls(scale, float(real_s), float(sim_s))
            except ValueError:
                raise ValueError(
                    f"COMPANYD_TIME_ANCHOR must be REAL:SIM epoch seconds, got {anchor!r}"
                ) from None
        now = _time.time()
        return cls(scale, now, now)

    def monotonic(self) -> float:
        """Simulated seconds since this clock was made: real monotonic time times ``scale``."""
        return (_time.monotonic() - self._mono0) * self.scale

    def time(self) -> float:
        """Simulated epoch seconds: ``sim_anchor + (time.time() - real_anchor) * scale``."""
        return self.sim_anchor + (_time.time() - self.real_anchor) * self.scale

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds / scale`` real seconds (a negative value is 0)."""
        await asyncio.sleep(max(0.0, seconds) / self.scale)


def clock_time(ts: float, timezone: str) -> str:
    """``HH:MM`` of epoch ``ts`` in ``timezone`` (a wall is minutes to hours away: the
    clock time says when; seconds are rounded up, so "until 14:35" is never early).
    """
    ts = float(int(ts + 59) // 60 * 60)
    return datetime.fromtimestamp(ts, ZoneInfo(timezone)).strftime("%H:%M")
