"""A call that got no answer counts as billed (issue 15, item 1): SpendBook.forfeit keeps its
reservation as spent at its worst case for the budget period, in memory and in the ledger
(so a restart keeps it), and each one publishes spend_unanswered with today's running count
and total for the one coalescing alert.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.spend import BudgetExhausted, SpendBook

from .spendkit import events, make_config, micro, reserve, running


def _ts(day: int = 20) -> float:
    return datetime(2026, 11, day, 9, 0, tzinfo=ZoneInfo("UTC")).timestamp()


@pytest.mark.anyio
async def test_a_forfeited_call_counts_at_its_worst_case_until_the_period_ends(
    tmp_path: Path, bus: EventBus
) -> None:
    clock = ManualClock(start=_ts())
    cfg = make_config(tmp_path, company="{daily_usd: 1.0, monthly_usd: 20}")
    state = tmp_path / "state"
    book = SpendBook(cfg, state, bus=bus, clock=clock)
    async with running(book):
        for _ in range(2):
            res = await reserve(book, "ceo", 300_000, out=100_000)  # worst case $0.40
            assert await book.forfeit(res, reason="ModelTimeout: no answer") == micro(400_000)
        assert await book.forfeit(res, reason="again") == 0  # no longer open: left alone
        with pytest.raises(BudgetExhausted):
            await reserve(book, "ceo", 300_000)  # $0.80 spent: $0.30 does not fit
        await book.flush()
        got = [
            (e.data["calls"], e.data["total_worst_case_usd"])
            for e in events(bus, "spend_unanswered")
        ]
        assert got == [(1, 0.4), (2, 0.8)]
        assert events(bus, "spend_unanswered")[-1].data["message"] == (
            "2 calls timed out; up to $0.8000 may have been billed"
        )
        rows = await book.ledger_rows()
        assert [(r["input_tokens"], r["output_tokens"], r["cost_pusd"]) for r in rows] == [
            (0, 0, 400_000 * 10**6),
            (0, 0, 400_000 * 10**6),
        ]
    book = SpendBook(cfg, state, bus=bus, clock=clock)  # a restart keeps them
    async with running(book):
        report = await book.budget_report()
        day = next(b for b in report["budgets"] if b["agent"] is None and b["period"] == "day")
        assert day["used_usd"] == 0.8
        clock.advance(86400)  # the next day starts clean, and so does the count
        await reserve(book, "ceo", 300_000)
        res = await reserve(book, "ceo", 1)
        await book.forfeit(res, reason="cancelled while the request was in flight")
        await book.flush()
        assert events(bus, "spend_unanswered")[-1].data["calls"] == 1
