"""Issue 15 item 8 for the spend ledger, on a real full disk (a small tmpfs): a settled
call whose ledger write fails is counted, held in memory and recorded once space returns;
one ``state_disk_full`` alert; the spend service keeps running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from companyd._fs import DiskAlarm, is_disk_failure
from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.llm._model import Usage
from companyd.spend import SpendBook
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
