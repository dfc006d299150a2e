"""Budget raises are all-or-nothing and bounded (issue 15, item 4): an absurd, non-finite or
negative raise is refused with a plain message and changes nothing; an accepted one is in
memory and in the ledger alike.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.spend import SpendBook, SpendError
from companyd.spend._ledger import LedgerError

from .spendkit import make_config, running


def _ts() -> float:
    return datetime(2026, 11, 20, 9, 0, tzinfo=ZoneInfo("UTC")).timestamp()


def _ledger_raises(state: Path) -> list[tuple[str, int]]:
    db = sqlite3.connect(state / "spend.sqlite")
    try:
        return [(str(s), int(a)) for s, a in db.execute("SELECT scope, amount_pusd FROM raises")]
    finally:
        db.close()


async def _cfo_limit(book: SpendBook) -> float:
    report = await book.budget_report()
    limit = next(b for b in report["budgets"] if b["agent"] == "cfo")["limit_usd"]
    assert limit is not None, "the CFO has a budget"
    return float(limit)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("amount", "message"),
    [
        (Decimal(10_000_000), "at most \\$1,000,000"),
        (1e308, "at most \\$1,000,000"),
        (Decimal("1e308"), "at most \\$1,000,000"),
        (float("inf"), "positive amount"),
        (float("nan"), "positive amount"),
        (Decimal("NaN"), "positive amount"),
        (-5, "positive amount"),
        (0, "positive amount"),
        (1e-9, "at least \\$0.000001"),
    ],
)
async def test_an_out_of_bounds_raise_is_refused_and_changes_nothing(
    tmp_path: Path, bus: EventBus, amount: Decimal | float, message: str
) -> None:
    cfg = make_config(tmp_path, agents={"ceo": None, "cfo": "{daily_usd: 0.2}"})
    state = tmp_path / "state"
    book = SpendBook(cfg, state, bus=bus, clock=ManualClock(start=_ts()))
    async with running(book):
        with pytest.raises(SpendError, match=message) as info:
            await book.raise_today("cfo", amount)
        assert "internal" not in str(info.value)
        assert await _cfo_limit(book) == 0.2  # memory unchanged, and the report still works
        await book.flush()
        assert _ledger_raises(state) == []  # ledger unchanged
        await book.raise_today("cfo", Decimal("0.3"))  # a sane raise still works
        assert await _cfo_limit(book) == 0.5


@pytest.mark.anyio
async def test_raises_that_add_up_past_the_bound_are_refused(tmp_path: Path, bus: EventBus) -> None:
    cfg = make_config(tmp_path, agents={"ceo": None, "cfo": "{daily_usd: 0.2}"})
    state = tmp_path / "state"
    book = SpendBook(cfg, state, bus=bus, clock=ManualClock(start=_ts()))
    async with running(book):
        await book.raise_today("cfo", Decimal(600_000))
        await book.raise_today("cfo", Decimal(300_000))
        with pytest.raises(SpendError, match="at most \\$1,000,000"):
            await book.raise_today("cfo", Decimal(200_000))
        assert await _cfo_limit(book) == 900_000.2
        # what was raised is said as the spend CLI says money: it read "$0.00" for $0.004
        await book.raise_today(None, Decimal("0.004"))  # the company budget
        with pytest.raises(SpendError, match=r"\(already raised today: \$0\.004\)"):
            await book.raise_today(None, Decimal(1_000_000))
        await book.flush()
        assert len(_ledger_raises(state)) == 3


@pytest.mark.anyio
async def test_a_raise_the_ledger_cannot_store_is_not_applied_in_memory(
    tmp_path: Path, bus: EventBus
) -> None:
    cfg = make_config(tmp_path, agents={"ceo": None, "cfo": "{daily_usd: 0.2}"})
    state = tmp_path / "state"
    book = SpendBook(cfg, state, bus=bus, clock=ManualClock(start=_ts()))
    async with running(book):
        db = sqlite3.connect(state / "spend.sqlite")
        db.execute(
            "CREATE TRIGGER no_raises BEFORE INSERT ON raises "
            "BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
        )
        db.commit()
        db.close()
        with pytest.raises(LedgerError, match="disk says no"):
            await book.raise_today("cfo", Decimal(1))
        assert await _cfo_limit(book) == 0.2
        assert book.exhausted("cfo") is None


@pytest.mark.anyio
async def test_concurrent_raises_cannot_pass_the_bound_together(
    tmp_path: Path, bus: EventBus
) -> None:
    cfg = make_config(tmp_path, agents={"ceo": None, "cfo": "{daily_usd: 0.2}"})
    state = tmp_path / "state"
    book = SpendBook(cfg, state, bus=bus, clock=ManualClock(start=_ts()))
    async with running(book):
        results = await asyncio.gather(
            book.raise_today("cfo", Decimal(600_000)),
            book.raise_today("cfo", Decimal(600_000)),
            return_exceptions=True,
        )
        assert sum(isinstance(r, SpendError) for r in results) == 1, results
        assert await _cfo_limit(book) == 600_000.2
        await book.flush()
        assert len(_ledger_raises(state)) == 1


def test_a_refused_raise_says_its_amount_as_money() -> None:
    # "a budget raise of $1000000000000.0" and "got '1E-7'": a float's repr, a Decimal's
    from companyd.spend._raises import check_bound, parse_amount

    with pytest.raises(SpendError) as big:
        check_bound("company", Decimal(10**12), 1e12, 0)
    assert str(big.value).startswith("a budget raise of $1,000,000,000,000.00 is refused")
    with pytest.raises(SpendError) as tiny:
        parse_amount(Decimal("1E-7"))
    assert str(tiny.value).endswith("got $0.0000001")
