"""Issue 15 item 8 for the spend ledger, on a real full disk (a small tmpfs): a settled
call whose ledger write fails is counted, held in memory and recorded once space returns;
one ``state_disk_full`` alert; the spend service keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companyd._fs import DiskAlarm, is_disk_failure
from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.llm._model import Usage
from companyd.spend import BudgetExhausted, SpendBook
from companyd.spend._ledger import Ledger, LedgerError
from companyd.testing.disk import DiskUnavailable, fill, small_disk

from .spendkit import events, make_config, reserve, running, spend

pytestmark = pytest.mark.anyio

CALLS = 200


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with small_disk(tmp_path / "disk", "16m") as d:
            yield d
    except DiskUnavailable as exc:
        pytest.skip(f"no real full disk here: {exc}")


async def test_calls_settled_on_a_full_disk_are_held_and_recorded_when_space_returns(
    tmp_path: Path, disk: Path
) -> None:
    bus = EventBus()
    state = disk / "state"
    book = SpendBook(make_config(tmp_path), state, bus=bus, clock=ManualClock())
    async with running(book) as ctx:
        await spend(book, "cfo", 1000)
        # calls that went out while there was space; the disk fills before they return
        reservations = [await reserve(book, "cfo", 10) for _ in range(CALLS)]
        filler = fill(disk)
        failed = 0
        for res in reservations:
            try:
                await book.settle(res, model="unit-model", usage=Usage(input_tokens=10))
            except LedgerError as exc:
                assert "check free disk space" in str(exc) or "state disk" in str(exc), exc
                failed += 1
        assert failed, "the ledger never failed on a full disk"
        assert book.unrecorded == failed
        used = await book.budget_report()  # counted in memory all along
        assert "0.003" in repr(used), used  # $0.001 + 200 × $0.00001
        assert len(events(bus, "state_disk_full")) == 1  # one alert, however many failed
        assert not await book.flush_unrecorded()  # still full: still held
        assert len(events(bus, "state_disk_full")) == 1
        filler.unlink()
        assert await book.flush_unrecorded()
        assert book.unrecorded == 0
        assert len(events(bus, "state_disk_recovered")) == 1
        assert not ctx.stopping.is_set()
    led = Ledger(state / "spend.sqlite", readonly=True)
    try:
        assert len(led.calls()) == 1 + CALLS
        assert led.inflight() == []
    finally:
        led.close()


async def test_a_reservation_the_full_disk_refused_raises_the_alarm_and_a_later_one_clears_it(
    tmp_path: Path, disk: Path
) -> None:
    """Chaos review: a reservation whose in-flight row the disk refused raised no alarm of
    the ledger's own (the agent put it on "run journal or ledger", which nothing ever
    cleared), and a reservation written again never reported the ledger recovered.
    """
    bus = EventBus()
    state = disk / "state"
    book = SpendBook(make_config(tmp_path), state, bus=bus, clock=ManualClock())
    async with running(book):
        await spend(book, "cfo", 1000)
        filler = fill(disk)
        refused = None
        for _ in range(CALLS):
            try:
                await reserve(book, "cfo", 10)
            except LedgerError as exc:
                refused = exc
                break
        assert refused is not None and is_disk_failure(refused), refused
        assert DiskAlarm.of(bus).failing == {"spend ledger"}
        assert len(events(bus, "state_disk_full")) == 1
        filler.unlink()
        await reserve(book, "cfo", 10)
        assert not DiskAlarm.of(bus).failing
        assert len(events(bus, "state_disk_recovered")) == 1


async def test_calls_held_over_midnight_still_count_against_the_month(
    tmp_path: Path, disk: Path
) -> None:
    """Calls settled on a full disk before midnight count in memory; the day rolling over
    (same month) reloads the month's spend from the ledger. If the disk takes writes again
    and a reservation rolls the period before the held rows are written, the month must
    still count them — before, it read the ledger without them and let the month's budget
    be overspent by what was held.
    """
    bus = EventBus()
    clock = ManualClock(start=datetime(2026, 11, 10, 23, 59, tzinfo=ZoneInfo("UTC")).timestamp())
    cfg = make_config(tmp_path, company="{daily_usd: 1.0, monthly_usd: 0.5}")
    book = SpendBook(cfg, disk / "state", bus=bus, clock=clock)
    async with book:  # no run loop: its retry every 5 s must not win the race tested here
        reservations = [await reserve(book, "cfo", 10_000) for _ in range(40)]  # $0.40
        filler = fill(disk)
        held = 0
        for res in reservations:
            try:
                await book.settle(res, model="unit-model", usage=Usage(input_tokens=10_000))
            except LedgerError:
                held += 1
        assert held, "the ledger never failed on a full disk"
        clock.advance(120)  # 00:01 the next day, same month
        filler.unlink()  # the disk takes writes again; the held rows are not written yet
        # $0.40 of the $0.50 month is spent: $0.105 more does not fit
        with pytest.raises(BudgetExhausted):
            await reserve(book, "cfo", 105_000)
        assert book.unrecorded == 0
    led = Ledger(disk / "state" / "spend.sqlite", readonly=True)
    try:
        assert len(led.calls()) == 40
    finally:
        led.close()


async def test_a_call_settled_after_midnight_on_a_full_disk_is_held_not_lost(
    tmp_path: Path, disk: Path
) -> None:
    """A call reserved before midnight answers after it, while the disk is full: the new
    period cannot be loaded from the ledger, but the paid call is still counted and held
    (recorded once space returns) — before, the settle failed before counting it.
    """
    bus = EventBus()
    clock = ManualClock(start=datetime(2026, 11, 10, 23, 59, tzinfo=ZoneInfo("UTC")).timestamp())
    book = SpendBook(make_config(tmp_path), disk / "state", bus=bus, clock=clock)
    async with book:
        res = await reserve(book, "cfo", 10_000)
        filler = fill(disk)
        clock.advance(120)  # the answer comes at 00:01
        with pytest.raises(LedgerError):
            await book.settle(res, model="unit-model", usage=Usage(input_tokens=10_000))
        assert book.unrecorded == 1  # held, not lost
        filler.unlink()
        assert await book.flush_unrecorded()
    led = Ledger(disk / "state" / "spend.sqlite", readonly=True)
    try:
        assert [r["cost_pusd"] for r in led.calls()] == [10_000 * 1_000_000]
    finally:
        led.close()


async def test_two_flushes_at_once_record_each_held_call_once(tmp_path: Path, disk: Path) -> None:
    """The run loop's retry, a new settle and a new period each flush the held calls; two
    at once must not write the same held row twice (the ledger would count it twice).
    """
    bus = EventBus()
    book = SpendBook(make_config(tmp_path), disk / "state", bus=bus, clock=ManualClock())
    async with book:
        reservations = [await reserve(book, "cfo", 10) for _ in range(CALLS)]
        filler = fill(disk)
        for res in reservations:
            with contextlib.suppress(LedgerError):
                await book.settle(res, model="unit-model", usage=Usage(input_tokens=10))
        assert book.unrecorded
        filler.unlink()
        assert all(await asyncio.gather(*(book.flush_unrecorded() for _ in range(3))))
        assert book.unrecorded == 0
    led = Ledger(disk / "state" / "spend.sqlite", readonly=True)
    try:
        assert len(led.calls()) == CALLS
    finally:
        led.close()
