"""companyd._aio.race and companyd.clock.within: who wins, who is cancelled, who is left."""

from __future__ import annotations

import asyncio

import pytest

from companyd._aio import cancel_and_wait, race
from companyd.clock import ManualClock, within

pytestmark = pytest.mark.anyio


async def _sleepers(clock: ManualClock, n: int) -> None:
    """Yield until ``n`` sleeps are pending on ``clock`` (the racers have started)."""
    while clock.sleepers < n:
        await asyncio.sleep(0)


async def _value(v: object, clock: ManualClock, after: float) -> object:
    await clock.sleep(after)
    return v


async def test_the_first_to_finish_wins_and_owned_losers_are_cancelled_and_awaited() -> None:
    clock = ManualClock()
    cleaned: list[str] = []

    async def slow() -> None:
        try:
            await clock.sleep(10)
        finally:
            cleaned.append("slow")

    async with asyncio.timeout(5):
        racing = asyncio.ensure_future(race(slow(), _value("fast", clock, 1)))
        await _sleepers(clock, 2)
        clock.advance(1)
        won = await racing
    assert (won.index, won.result()) == (1, "fast")
    assert cleaned == ["slow"]  # cancelled and awaited before race() returned


async def test_a_task_passed_in_is_the_callers_and_keeps_running() -> None:
    clock = ManualClock()
    async with asyncio.timeout(5):
        shared = asyncio.ensure_future(_value("shared", clock, 10))
        racing = asyncio.ensure_future(race(shared, clock.sleep(1)))
        await _sleepers(clock, 2)
        clock.advance(1)
        won = await racing
        assert won.index == 1
        assert not shared.done()
        clock.advance(9)
        assert await shared == "shared"


async def test_the_winners_exception_is_read_not_raised() -> None:
    async def boom() -> None:
        raise KeyError("x")

    async with asyncio.timeout(5):
        won = await race(boom(), asyncio.sleep(3600))
    assert won.index == 0
    with pytest.raises(KeyError):
        won.result()


async def test_a_cancelled_caller_cancels_the_owned_contenders() -> None:
    cleaned: list[int] = []

    async def forever(n: int) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.append(n)

    async with asyncio.timeout(5):
        racing = asyncio.ensure_future(race(forever(1), forever(2)))
        await asyncio.sleep(0)
        racing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await racing
    assert sorted(cleaned) == [1, 2]


async def test_race_needs_a_contender() -> None:
    with pytest.raises(ValueError, match="at least one"):
        await race()


async def test_within_returns_in_time_and_times_out_on_the_injected_clock() -> None:
    clock = ManualClock()
    async with asyncio.timeout(5):
        quick = asyncio.ensure_future(within(clock, 5, _value(7, clock, 1)))
        await _sleepers(clock, 2)
        clock.advance(1)
        assert await quick == 7
        slow = asyncio.ensure_future(within(clock, 5, _value(8, clock, 10)))
        await _sleepers(clock, 2)
        clock.advance(5)
        with pytest.raises(TimeoutError, match="within 5 s"):
            await slow
        assert clock.sleepers == 0  # the timed-out coroutine's sleep was cancelled


async def test_cancel_and_wait_swallows_the_losers_outcomes() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("ignored")

    async with asyncio.timeout(5):
        t = asyncio.ensure_future(fails())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await cancel_and_wait(t)
    assert t.done()
