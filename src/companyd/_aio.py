"""Structured-concurrency helpers shared by every service: one way to race awaitables.

The daemon waits on "whichever comes first" all over: a run or its heartbeat deadline, the
next event or the stop request, a delivery or the next retry time. Written by hand each time,
``asyncio.wait(..., FIRST_COMPLETED)`` leaks the losing tasks or forgets to cancel them when
the waiter itself is cancelled. :func:`race` is that pattern once, with one ownership rule:

* a **coroutine** passed in is run as a task that the race owns: when the race ends (a winner,
  or the caller is cancelled) every owned task still running is cancelled and awaited, so no
  orphan outlives the call;
* a **future or task** passed in belongs to the caller and is never cancelled by the race
  (it may be shared, e.g. a run that several callers wait on).

The winner's result or exception is not raised by :func:`race`; the caller reads it from
:attr:`Finished.future`, which keeps "which one finished" and "how it ended" apart.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Finished", "cancel_and_wait", "news_or_deadline", "race"]


@dataclass(frozen=True, slots=True)
class Finished:
    """The first contender of a :func:`race` to finish: its position and its (done) future."""

    index: int
    future: asyncio.Future[Any]

    def result(self) -> Any:
        """The winner's result (re-raises its exception, or CancelledError if cancelled)."""
        return self.future.result()


async def race(*contenders: Awaitable[Any]) -> Finished:
    """Wait for the first of ``contenders`` to finish (return, raise or be cancelled).

    Args:
        contenders: coroutines (owned by the race: cancelled and awaited when they lose) and
            futures or tasks (the caller's: left running). At least one.

    Returns:
        The first to finish; when several finish in the same loop iteration, the one passed
        first.

    Raises:
        ValueError: no contenders.
        asyncio.CancelledError: the caller was cancelled (owned contenders are cancelled too).
    """
    if not contenders:
        raise ValueError("race() needs at least one awaitable")
    futures: list[asyncio.Future[Any]] = []
    owned: list[asyncio.Future[Any]] = []
    try:
        for aw in contenders:
            if inspect.iscoroutine(aw):
                fut: asyncio.Future[Any] = asyncio.ensure_future(aw)
                owned.append(fut)
            else:
                fut = asyncio.ensure_future(aw)
            futures.append(fut)
        if not any(f.done() for f in futures):
            await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
        index = next(i for i, f in enumerate(futures) if f.done())
        return Finished(index, futures[index])
    finally:
        await cancel_and_wait(*(f for f in owned if not f.done()))


async def cancel_and_wait(*futures: asyncio.Future[Any]) -> None:
    """Cancel ``futures`` and wait until each has finished (their outcomes are discarded).

    If the caller is cancelled while waiting, the wait is left (the futures stay cancelled)
    and the cancellation propagates.
    """
    for f in futures:
        f.cancel()
    if futures:
        await asyncio.wait(futures)
    for f in futures:
        # Mark a failure as retrieved: the outcome of a cancelled loser is nobody's business.
        if f.done() and not f.cancelled():
            f.exception()


async def news_or_deadline(
    news: asyncio.Event,
    due: float | None,
    now: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """Wait until ``news`` is set or ``now()`` reaches ``due`` (None: until news only).

    A delivery loop's wait between passes. ``now`` and ``sleep`` are a clock's (monotonic or
    wall time, as ``due`` is): the time left is re-read after every sleep, so a clock that
    moved between planning and sleeping (a ManualClock jump, a busy loop) cannot stretch
    the wait.
    """
    if news.is_set():
        return
    if due is None:
        await news.wait()
        return

    async def until() -> None:
        while (left := due - now()) > 0:
            await sleep(left)

    await race(news.wait(), until())
